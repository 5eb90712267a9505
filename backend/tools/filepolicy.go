package tools

import (
	"errors"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// checkPolicy asks the file policy about the open handle fd (O_PATH or
// opened), whose stat is st: the decision is on what was opened, by its
// canonical path and inode, whatever path the call named.
func checkPolicy(policy *filepolicy.Policy, fd int, st *unix.Stat_t) error {
	if policy == nil {
		return nil
	}
	canonical, err := filepolicy.FdPath(fd)
	if err != nil {
		return toolerr.New(mcpwire.CodePermissionDenied, "argument \"path\": the file policy cannot tell what was opened: %v", err)
	}
	return refusal(policy.Check(canonical, filepolicy.InodeOf(st)))
}

// checkPolicy asks the file policy about the name file.write is about to
// replace or create: the canonical path of the open directory plus the
// name, and the inode already there.
func (w writeTarget) checkPolicy(policy *filepolicy.Policy) error {
	if policy == nil {
		return nil
	}
	dir, err := filepolicy.FdPath(int(w.dir.Fd()))
	if err != nil {
		return toolerr.New(mcpwire.CodePermissionDenied, "argument \"path\": the file policy cannot tell where %s is: %v", w.dirPath, err)
	}
	var st *unix.Stat_t
	if w.exists {
		st = new(unix.Stat_t)
		if err := unix.Fstatat(int(w.dir.Fd()), w.base, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fsError("path", &fs.PathError{Op: "stat", Path: w.path(), Err: err})
		}
	}
	return refusal(policy.Check(filepath.Join(dir, w.base), filepolicy.InodeOf(st)))
}

// checkMissing asks the file policy about a directory that does not exist
// yet (file.write with createParents): the canonical path of its deepest
// existing ancestor plus the rest.
func checkMissing(policy *filepolicy.Policy, p string) error {
	if policy == nil {
		return nil
	}
	rest := ""
	for {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err == nil {
			canonical, err := filepolicy.FdPath(fd)
			unix.Close(fd)
			if err != nil {
				return toolerr.New(mcpwire.CodePermissionDenied, "argument \"path\": the file policy cannot tell where %s is: %v", p, err)
			}
			return refusal(policy.Check(filepath.Join(canonical, rest), nil))
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return nil // the creation fails on its own, with its own error
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = filepath.Dir(p)
	}
}

// refusal renders a policy refusal as the tool error PERMISSION_DENIED.
func refusal(err error) error {
	if err == nil {
		return nil
	}
	return toolerr.New(mcpwire.CodePermissionDenied, "argument \"path\": %v", err)
}
