package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times (100
// on Linux whatever the architecture).
const clockTicks = 100

// cpuUse is CPU time in seconds: of a process and its descendants (pid,
// name), or of the machine (busy of total).
type cpuUse struct {
	pid         int
	name        string
	busy, total float64
	// parts is busy by kind of process (parts), when it has descendants.
	parts map[string]float64
}

// partsList lists the parts, the largest first, each with per(seconds).
func (c cpuUse) partsList(per func(float64) string) string {
	kinds := make([]string, 0, len(c.parts))
	for k, v := range c.parts {
		if v != 0 {
			kinds = append(kinds, k)
		}
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(c.parts[b], c.parts[a]), cmp.Compare(a, b)) })
	list := make([]string, len(kinds))
	for i, k := range kinds {
		list[i] = k + " " + per(c.parts[k])
	}
	return strings.Join(list, ", ")
}

func cores() int { return runtime.NumCPU() }

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-pids: %q is not a process ID", f)
		}
		if _, err := os.Stat(filepath.Join("/proc", f)); err != nil {
			return nil, fmt.Errorf("-pids: no process %d", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// procStat is what cpuOf reads of /proc/<pid>/stat.
type procStat struct {
	name  string
	ppid  int
	ticks float64 // utime + stime + cutime + cstime
}

// readStat reads /proc/<pid>/stat: the name is between the first '(' and
// the last ')' (it may hold spaces), the fields after it are counted from
// state (field 3).
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return procStat{name: s[open+1 : closing], ppid: ppid, ticks: ticks}, true
}

// snapshot is every process's procStat at one moment, by pid.
type snapshot map[int]procStat

func takeSnapshot() snapshot {
	all := snapshot{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			if st, ok := readStat(n); ok {
				all[n] = st
			}
		}
	}
	return all
}

// cpuOf returns the CPU time so far of each pid with its descendants (a
// PostgreSQL server's backends are children of its postmaster; those
// that exited count in their parent's cutime and cstime).
func cpuOf(pids []int) []cpuUse { return takeSnapshot().cpuOf(pids) }

func (all snapshot) cpuOf(pids []int) []cpuUse {
	out := make([]cpuUse, len(pids))
	for i, root := range pids {
		out[i] = cpuUse{pid: root, name: all[root].name}
		for pid, st := range all {
			if descends(all, pid, root) {
				out[i].busy += st.ticks / clockTicks
			}
		}
	}
	return out
}

// parts splits the CPU time root and its descendants used from before to
// after by kind of process (processKind), in seconds. A process that
// exited meanwhile is counted with root: its parent (the postmaster, for
// a PostgreSQL server) took its whole CPU time into cutime and cstime, so
// root's part is root's own time and the exited processes' time in the
// window. The parts add up to cpuOf's difference.
func parts(before, after snapshot, root int) map[string]float64 {
	out := map[string]float64{}
	rootKind := processKind(root, root, after[root].name)
	for pid, st := range after {
		if descends(after, pid, root) {
			out[processKind(pid, root, st.name)] += (st.ticks - before[pid].ticks) / clockTicks
		}
	}
	for pid, st := range before {
		if _, alive := after[pid]; !alive && descends(before, pid, root) {
			out[rootKind] -= st.ticks / clockTicks
		}
	}
	return out
}

// postgresKinds are the process titles of a PostgreSQL server's
// background processes (after "postgres: "); a client backend's title is
// "postgres: user database host(port) state".
var postgresKinds = []string{"autovacuum worker", "autovacuum launcher", "checkpointer", "background writer", "walwriter",
	"logical replication launcher", "logical replication worker", "stats collector", "archiver", "walsender", "walreceiver",
	"startup", "parallel worker"}

// processKind names what pid does for the CPU breakdown of root's tree:
// a PostgreSQL background process by its title, client backends by their
// database, root itself (with the children it reaped), anything else by
// its command name.
func processKind(pid, root int, comm string) string {
	if pid == root {
		return "itself and exited processes"
	}
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return titleKind(strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")), comm)
}

// titleKind is processKind's reading of a process title.
func titleKind(title, comm string) string {
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return comm
	}
	for _, k := range postgresKinds {
		if strings.HasPrefix(rest, k) {
			return k
		}
	}
	if f := strings.Fields(rest); len(f) >= 2 {
		return "backends of " + f[1]
	}
	return rest
}

// descends reports whether pid is root or one of its descendants.
func descends(all map[int]procStat, pid, root int) bool {
	for seen := 0; pid > 1 && seen < 64; seen++ {
		if pid == root {
			return true
		}
		pid = all[pid].ppid
	}
	return pid == root
}

// machineCPU reads the first line of /proc/stat: busy is every state but
// idle and iowait.
func machineCPU() cpuUse {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuUse{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var total, idle float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest and guest_nice are in user and nice already
			break
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return cpuUse{name: "machine", busy: (total - idle) / clockTicks, total: total / clockTicks}
}
