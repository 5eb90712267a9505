package tools

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// stallingFS is a real FUSE filesystem whose server completes the
// handshake and then never answers: every lookup, open or read under it
// sleeps in the kernel where no signal (short of SIGKILL) or O_NONBLOCK
// reaches it, the way a hung network or FUSE mount does. Aborting it fails
// every stalled request, as `umount -f` does.
type stallingFS struct {
	dir      string
	fd       int
	requests atomic.Int64 // requests left unanswered
	stop     sync.Once
	served   chan struct{}
}

const (
	fuseInit           = 26
	fuseInterrupt      = 36
	fuseInHeader       = 40
	fuseOutHeader      = 16
	fuseInitOutLen     = 64
	fuseParallelDirops = 1 << 18
)

// newStallingFS mounts a stalling FUSE filesystem on a temp dir (needs root
// and /dev/fuse). Cleanup aborts and unmounts it.
func newStallingFS(t testing.TB) *stallingFS {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse (FUSE is needed to stall a read in the kernel): %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("stall", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Fatalf("mount fuse: %v", err)
	}
	fs := &stallingFS{dir: dir, fd: fd, served: make(chan struct{})}
	go fs.serve()
	t.Cleanup(func() {
		fs.abort()
		<-fs.served
		unix.Close(fd)
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return fs
}

// serve answers the handshake and reads (and drops) every other request
// until the connection is aborted.
func (fs *stallingFS) serve() {
	defer close(fs.served)
	buf := make([]byte, 128<<10)
	for {
		n, err := unix.Read(fs.fd, buf)
		if err == unix.EINTR || err == unix.ENOENT { // ENOENT: a request interrupted before it was read
			continue
		}
		if err != nil {
			return // ENODEV once aborted
		}
		if n < fuseInHeader {
			continue
		}
		switch binary.LittleEndian.Uint32(buf[4:]) {
		case fuseInit:
			fs.replyInit(binary.LittleEndian.Uint64(buf[8:]), binary.LittleEndian.Uint32(buf[fuseInHeader+4:]))
		case fuseInterrupt:
		default:
			fs.requests.Add(1)
		}
	}
}

func (fs *stallingFS) replyInit(unique uint64, kernelMinor uint32) {
	out := make([]byte, fuseOutHeader+fuseInitOutLen)
	le := binary.LittleEndian
	le.PutUint32(out[0:], uint32(len(out)))
	le.PutUint64(out[8:], unique)
	body := out[fuseOutHeader:]
	le.PutUint32(body[0:], 7)                    // major
	le.PutUint32(body[4:], min(kernelMinor, 31)) // minor
	le.PutUint32(body[12:], fuseParallelDirops)  // flags: lookups do not wait for each other
	le.PutUint32(body[20:], 4096)                // max_write
	le.PutUint32(body[24:], 1)                   // time_gran
	_, _ = unix.Write(fs.fd, out)
}

// abort ends the connection the way `umount -f` does: every stalled
// request fails and the server's read returns.
func (fs *stallingFS) abort() {
	fs.stop.Do(func() { _ = unix.Unmount(fs.dir, unix.MNT_FORCE) })
}
