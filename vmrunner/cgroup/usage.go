package cgroup

import "time"

// Usage is what a group measured: the step's usage in vmrunner.StepResult.
type Usage struct {
	PeakMemoryBytes int64         `json:"peakMemoryBytes"`
	CPUTime         time.Duration `json:"cpuTimeNs"`
	PidsPeak        int64         `json:"pidsPeak"`
	OOMKills        int64         `json:"oomKills"`
	ThrottledTime   time.Duration `json:"throttledNs"`
	// MemoryBytes and Pids are the current figures, for a live sandbox's
	// usage; a finished step's record keeps only the peaks.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
}
