package server

import (
	"encoding/json"
	"net/http"
)

// /healthz says the process serves; /readyz says whether it takes calls now
// (not while admission is full or memory is above its high-water mark).

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	active, queued := s.adm.Occupancy()
	body := map[string]any{"status": "ready", "active": active, "queued": queued, "maxQueue": s.adm.Limits().MaxQueue}
	code := http.StatusOK
	mem := s.mem.Load()
	switch {
	case s.adm.Full():
		body["status"] = "overloaded"
		code = http.StatusServiceUnavailable
	case mem.Shedding():
		body["status"] = "memory"
		code = http.StatusServiceUnavailable
	}
	if mem != nil {
		m := mem.Last()
		body["memory"] = map[string]any{"shedding": m.Shedding, "anon": m.Anon, "highWater": m.HighWater}
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
