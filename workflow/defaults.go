package workflow

import "slices"

// build applies defaults to a parsed step: a step's own value wins, then
// the workflow's defaults, then the built-in defaults. Env maps merge, the
// step's variables overriding the defaults'. A step's network replaces the
// defaults' network as a whole.
func build(s *stepSpec, d *settings) Step {
	st := Step{
		Name:     s.name,
		Run:      s.run,
		Packages: sortedUnique(s.packages),
		Needs:    sortedUnique(refNames(s.needs)),
		Inputs:   sortedUnique(refNames(s.inputs)),
		Outputs:  sortedUnique(s.outputs),
		Resources: Resources{
			VCPU:       int(s.vcpu.or(d.vcpu.or(DefaultVCPU))),
			Memory:     s.memory.or(d.memory.or(DefaultMemory)),
			PIDs:       int(s.pids.or(d.pids.or(DefaultPIDs))),
			Disk:       s.disk.or(d.disk.or(DefaultDisk)),
			TimeoutMS:  s.timeout.or(d.timeout.or(DefaultTimeoutMS)),
			Bandwidth:  s.bandwidth.or(d.bandwidth.or(DefaultBandwidth)),
			IOReadBps:  s.ioRead.or(d.ioRead.or(DefaultIORate)),
			IOWriteBps: s.ioWrite.or(d.ioWrite.or(DefaultIORate)),
			DiskInodes: s.diskInodes.or(d.diskInodes.or(0)),
		},
		Isolation:  firstNonEmpty(s.isolation, d.isolation, DefaultIsolation),
		Hypervisor: firstNonEmpty(s.hypervisor, d.hypervisor, DefaultHypervisor),

		Deterministic:        s.deterministic,
		DeterministicOutputs: sortedUnique(s.detOutputs),
	}
	switch {
	case s.netSet:
		st.Network.Allow = sortedUnique(s.allow)
	default:
		st.Network.Allow = sortedUnique(d.allow)
	}
	st.Env = make(map[string]string, len(d.env)+len(s.env))
	for k, v := range d.env {
		st.Env[k] = v
	}
	for k, v := range s.env {
		st.Env[k] = v
	}
	return st
}

func firstNonEmpty[T ~string](vs ...T) T {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func refNames(rs []ref) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// sortedUnique returns a sorted copy of ss without repeats; never nil.
func sortedUnique(ss []string) []string {
	out := make([]string, 0, len(ss))
	out = append(out, ss...)
	slices.Sort(out)
	j := 0
	for i, s := range out {
		if i > 0 && s == out[j-1] {
			continue
		}
		out[j] = s
		j++
	}
	return out[:j]
}
