package deploy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPauseAt: only the named point waits (until ctx ends), having created
// the file the test waits on; every other point passes at once.
func TestPauseAt(t *testing.T) {
	for _, c := range []struct {
		name, point string
		waits       bool
	}{
		{"the named point", PauseVerified, true},
		{"another point", PauseTookOver, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "paused")
			pause := PauseAt(PauseVerified+"="+file, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { pause(ctx, c.point); close(done) }()
			if !c.waits {
				<-done
				if _, err := os.Stat(file); !os.IsNotExist(err) {
					t.Fatalf("%s created %s (%v)", c.point, file, err)
				}
				cancel()
				return
			}
			for _, err := os.Stat(file); err != nil; _, err = os.Stat(file) {
				time.Sleep(5 * time.Millisecond)
			}
			select {
			case <-done:
				t.Fatal("returned before ctx ended")
			default:
			}
			cancel()
			<-done
		})
	}
}
