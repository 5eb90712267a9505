package snapshot

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// benchHost is newHost with a release binary of realistic size (16 MiB), so
// the figures say what a snapshot and a rollback cost during a cutover.
func benchHost(b *testing.B) *host {
	h := newHost(b)
	big := make([]byte, 16<<20)
	rand.Read(big)
	p := filepath.Join(h.root, "build-big")
	if err := os.WriteFile(p, big, 0o755); err != nil {
		b.Fatal(err)
	}
	if _, _, err := h.store.Install("big", p); err != nil {
		b.Fatal(err)
	}
	if err := h.store.SetCurrent("big"); err != nil {
		b.Fatal(err)
	}
	return h
}

func BenchmarkCreate(b *testing.B) {
	h := benchHost(b)
	b.SetBytes(16 << 20)
	for b.Loop() {
		if _, err := Create(context.Background(), h.spec("bench")); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := Prune(h.stateDir, 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkRestoreAfterCutover measures a rollback's file work: verify
// everything, then rewrite config, unit and drop-ins and swap current (the
// release directory is still there, as in a real rollback).
func BenchmarkRestoreAfterCutover(b *testing.B) {
	h := benchHost(b)
	m, err := Create(context.Background(), h.spec("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(16 << 20)
	for b.Loop() {
		b.StopTimer()
		cutover(b, h)
		b.StartTimer()
		if _, err := Restore(m); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := h.store.Remove("v2"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
