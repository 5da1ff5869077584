// Package hoststate owns what a step leaves on the host between its start
// and its cleanup, for both backends:
//
//   - the names of everything a step creates, derived from (run, step) by
//     one sanitising function: its network namespace (NetnsName), its
//     cgroup (CgroupPath), its state file (StateFileName), the namespace
//     backend's jail root (JailRoot) and the vm backend's working and jail
//     root directories (VMWorkDir, VMRootDir);
//   - the state file that lists them: written before each thing is created
//     (Write), removed once everything is removed again (Remove), with the
//     owning process's pid and start time so that a reused pid is not taken
//     for a live owner (State.OwnerAlive); run directories carry the same
//     owner record (WriteOwner);
//   - GC, which removes what dead owners left: the cgroups (killing what is
//     left in them) and network namespaces first, then the workspace quota
//     mounts and their loop devices, the directories (rmdir, never
//     recursively) and the state files; then the run directories, after
//     undoing any workspace quota still mounted in them; then, in the
//     workspace quota's template directory beside the run directories
//     (TemplatesDir, STATEDIR/quota-templates), what no apply will use.
//     Nothing is ever removed through a mount. `agentsandbox gc` is one
//     call of GC.
//
// The package sits below the backends (vmrunner/namespace, vmrunner/vm)
// and the sandbox lifecycle, and above the mechanisms it drives (netns,
// vmrunner/cgroup, vmrunner/wsquota); it imports no backend.
package hoststate
