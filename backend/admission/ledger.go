package admission

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Ledger is the file through which the processes serving one socket (the
// two production slots during a cutover) hold one set of limits: a page of
// shared memory (a file under the service's runtime directory, mapped by
// each) with one record per process, its live holdings in the packed form
// of the controller's state, and a lock byte. While more than one process
// has a record, each decides under that lock with the others' holdings
// added to its own; alone, a process decides as if the ledger were not
// there.
//
// Every lock is an open file description lock (fcntl F_OFD_*): the kernel
// drops it when its holder dies, however it dies. A process holds its
// record's lock for its life, so a record whose lock is free belongs to a
// dead process. Its commands may outlive it for a moment (systemd kills
// what is left in the unit's cgroup when the main process dies), so its
// record is reclaimed once its cgroup holds none of them: the cgroup is
// empty or gone, or a live process of the ledger runs in it (a restart of
// the unit, which systemd starts only once the old one's cgroup is empty;
// or, without systemd, processes that share one cgroup, where the cgroup
// cannot tell them apart).
// Until then its holdings count as they were.
type Ledger struct {
	f    *os.File
	mem  []byte
	rec  int // our record
	pid  uint64
	path string
	// cgroupRoot is the cgroup v2 mount the records' cgroups are under.
	cgroupRoot string
}

const (
	ledgerSize    = 8192
	ledgerMagic   = 0x32306d6461706d63 // "cmpadm02", little-endian
	offMagic      = 0
	offEpoch      = 8  // bumped whenever a record is taken or freed
	offLock       = 64 // the lock byte: decisions while shared
	offRecords    = 128
	recordSize    = 512
	ledgerRecords = 8
	// Within a record.
	recPid   = 0  // 0: free
	recUsage = 8  // the holder's state word at its last decision
	recAck   = 16 // the epoch the holder last saw: from then on it decides under the lock
	recCgLen = 24 // the length of the holder's cgroup path, which follows
	recCg    = 32
	// At the record's end, after the room for the cgroup path (a build
	// before these fields never wrote them: they read as zero there, a
	// holder with no waiters and no beat).
	recBeat  = recordSize - 32 // the holder's monotonic clock at its last look
	recHeads = recordSize - 24 // its oldest waiter's enqueue time, per kind (0: none)
	maxCg    = recBeat - recCg
)

// LedgerFile is the ledger's name inside the runtime directory.
const LedgerFile = "admission.ledger"

// OpenLedger opens (creating it if need be) the ledger in dir and takes a
// record in it for this process.
func OpenLedger(dir string) (*Ledger, error) {
	return openLedger(dir, unifiedMount(), "/proc/self/cgroup")
}

// unifiedMount is where the cgroup v2 hierarchy is mounted: at the top on a
// unified host, under unified/ on a hybrid one.
func unifiedMount() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d
		}
	}
	return "/sys/fs/cgroup"
}

func openLedger(dir, cgroupRoot, procCgroup string) (*Ledger, error) {
	path := filepath.Join(dir, LedgerFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("admission ledger: %w", err)
	}
	l := &Ledger{f: f, pid: uint64(os.Getpid()), path: path, cgroupRoot: cgroupRoot}
	if err := l.open(ownCgroup(procCgroup)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("admission ledger %s: %w", path, err)
	}
	return l, nil
}

// ownCgroup is the process's cgroup v2 path ("" when unknown).
func ownCgroup(procCgroup string) string {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

func (l *Ledger) open(cgroup string) error {
	if err := l.lockRange(offLock, 1, true); err != nil {
		return err
	}
	defer l.Unlock()
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < ledgerSize {
		if err := l.f.Truncate(ledgerSize); err != nil {
			return err
		}
	}
	l.mem, err = unix.Mmap(int(l.f.Fd()), 0, ledgerSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	switch m := l.word(offMagic); m.Load() {
	case 0:
		m.Store(ledgerMagic)
	case ledgerMagic:
	default:
		_ = unix.Munmap(l.mem)
		return errors.New("not a ledger of this version")
	}
	l.rec = -1
	for i := range ledgerRecords {
		// A record whose lock can be had is free or a dead process's.
		if l.tryLockRange(recordOff(i), recordSize) {
			l.rec = i
			break
		}
	}
	if l.rec < 0 {
		_ = unix.Munmap(l.mem)
		return fmt.Errorf("all %d records held", ledgerRecords)
	}
	l.setCgroup(l.rec, cgroup)
	l.clearHeads(l.rec)
	l.word(recordOff(l.rec) + recUsage).Store(0)
	l.word(recordOff(l.rec) + recPid).Store(l.pid)
	// Not acknowledged yet: until its controller has taken the record up
	// (Controller.Share), the others count it as holding every slot.
	l.word(recordOff(l.rec) + recAck).Store(0)
	l.word(offEpoch).Add(1)
	return nil
}

// setCgroup writes record i's cgroup path (none if it does not fit).
func (l *Ledger) setCgroup(i int, cg string) {
	o := recordOff(i)
	if len(cg) > maxCg {
		cg = ""
	}
	copy(l.mem[o+recCg:o+recordSize], cg)
	l.word(o + recCgLen).Store(uint64(len(cg)))
}

func (l *Ledger) cgroupOf(i int) string {
	o := recordOff(i)
	n := min(l.word(o+recCgLen).Load(), maxCg)
	return string(l.mem[o+recCg : o+recCg+int64(n)])
}

// cgroupVacated reports whether cgroup cg holds none of a dead record's
// processes any more: it is empty or gone, or a live record's process
// (ours included) runs in it.
func (l *Ledger) cgroupVacated(cg string, dead int) bool {
	if cg == "" {
		return true // unknown: nothing to wait for
	}
	for i := range ledgerRecords {
		o := recordOff(i)
		if i != dead && l.word(o+recPid).Load() != 0 && l.cgroupOf(i) == cg && (i == l.rec || l.held(o, recordSize)) {
			return true
		}
	}
	b, err := os.ReadFile(filepath.Join(l.cgroupRoot, filepath.Clean("/"+cg), "cgroup.events"))
	if err != nil {
		return true // gone
	}
	return !strings.Contains(string(b), "populated 1")
}

// clearHeads forgets record i's waiters and beat.
func (l *Ledger) clearHeads(i int) {
	o := recordOff(i)
	l.word(o + recBeat).Store(0)
	for k := range numKinds {
		l.word(o + recHeads + int64(k)*8).Store(0)
	}
}

func recordOff(i int) int64 { return offRecords + int64(i)*recordSize }

// word is the 64-bit word at off of the mapping (8-aligned: the mapping is
// page-aligned).
func (l *Ledger) word(off int64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&l.mem[off]))
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.path }

func (l *Ledger) lockRange(off, n int64, wait bool) error {
	cmd := unix.F_OFD_SETLK
	if wait {
		cmd = unix.F_OFD_SETLKW
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: off, Len: n}
	for {
		err := unix.FcntlFlock(l.f.Fd(), cmd, &lk)
		if err != unix.EINTR {
			return err
		}
	}
}

func (l *Ledger) tryLockRange(off, n int64) bool { return l.lockRange(off, n, false) == nil }

// held reports whether another open file description holds a lock on
// [off, off+n): a record so held belongs to a live process.
func (l *Ledger) held(off, n int64) bool {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: off, Len: n}
	if err := unix.FcntlFlock(l.f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return true // cannot tell: count it, never reclaim on doubt
	}
	return lk.Type != unix.F_UNLCK
}

// Lock takes the lock byte, waiting for the process that holds it.
func (l *Ledger) Lock() {
	if err := l.lockRange(offLock, 1, true); err != nil {
		// Only a broken descriptor fails here; deciding unlocked would
		// break the limit silently, so fail loudly.
		panic(fmt.Sprintf("admission ledger: lock: %v", err))
	}
}

// Unlock releases the lock byte.
func (l *Ledger) Unlock() {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: offLock, Len: 1}
	_ = unix.FcntlFlock(l.f.Fd(), unix.F_OFD_SETLK, &lk)
}

// Epoch is the membership's generation.
func (l *Ledger) Epoch() uint64 { return l.word(offEpoch).Load() }

// Publish records our holdings, the epoch we decide under and our oldest
// waiters (see cross.go). Under Lock.
func (l *Ledger) Publish(state, epoch uint64, heads [numKinds]int64) {
	o := recordOff(l.rec)
	l.word(o + recUsage).Store(state)
	l.word(o + recAck).Store(epoch)
	for k, t := range heads {
		l.word(o + recHeads + int64(k)*8).Store(uint64(t))
	}
}

// Beat records that we looked at the ledger at now (monoNow): our waiters
// are live. Once a look, not once a decision: a clock read is a system
// call.
func (l *Ledger) Beat(now int64) { l.word(recordOff(l.rec) + recBeat).Store(uint64(now)) }

// Heads appends to dst the oldest waiters of the other processes that
// looked at the ledger less than peerStale before now. Under Lock.
func (l *Ledger) Heads(dst []peerHead, now int64) []peerHead {
	for i := range ledgerRecords {
		o := recordOff(i)
		pid := l.word(o + recPid).Load()
		if i == l.rec || pid == 0 || now-int64(l.word(o+recBeat).Load()) >= int64(peerStale) {
			continue
		}
		for k := range numKinds {
			if t := int64(l.word(o + recHeads + int64(k)*8).Load()); t != 0 {
				dst = append(dst, peerHead{rec: i, pid: pid, kind: Kind(k), since: t})
			}
		}
	}
	return dst
}

// Peers is what the other processes with a record hold, added field by
// field (saturating), and how many there are. A peer that has not yet
// seen the current epoch may still be deciding alone: it counts as holding
// every slot (not the queue), until it has seen it.
func (l *Ledger) Peers() (held uint64, n int) {
	epoch := l.Epoch()
	for i := range ledgerRecords {
		if i == l.rec {
			continue
		}
		o := recordOff(i)
		if l.word(o+recPid).Load() == 0 {
			continue
		}
		n++
		u := l.word(o + recUsage).Load()
		if l.word(o+recAck).Load() != epoch {
			u |= fieldMask<<shTotal | fieldMask<<shNonControl | fieldMask<<shShell
		}
		held = addUsage(held, u)
	}
	return held, n
}

// Reap frees the records of dead processes (their locks gone, their
// cgroups vacated) and returns their pids. Under Lock.
func (l *Ledger) Reap() []int {
	var dead []int
	for i := range ledgerRecords {
		o := recordOff(i)
		pid := l.word(o + recPid).Load()
		if i == l.rec || pid == 0 || l.held(o, recordSize) || !l.cgroupVacated(l.cgroupOf(i), i) {
			continue
		}
		l.word(o + recUsage).Store(0)
		l.clearHeads(i)
		l.word(o + recPid).Store(0)
		dead = append(dead, int(pid))
	}
	if len(dead) > 0 {
		l.word(offEpoch).Add(1)
	}
	return dead
}

// Close frees our record (the others see the epoch change) and the file.
func (l *Ledger) Close() error {
	l.Lock()
	o := recordOff(l.rec)
	l.word(o + recUsage).Store(0)
	l.clearHeads(l.rec)
	l.word(o + recPid).Store(0)
	l.word(offEpoch).Add(1)
	l.Unlock()
	err := unix.Munmap(l.mem)
	return errors.Join(err, l.f.Close())
}

// addUsage adds two packed states field by field, saturating each field
// (a sum past MaxLimit is past every limit anyway).
func addUsage(a, b uint64) uint64 {
	var out uint64
	for sh := uint(0); sh <= shQNormal; sh += fieldBits {
		out |= uint64(min(field(a, sh)+field(b, sh), fieldMask)) << sh
	}
	return out
}
