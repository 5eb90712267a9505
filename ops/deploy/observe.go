package deploy

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"github.com/overdeck/mcp-backend/ops/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// supervision observes every loaded service for DuplicateSupervisors.
func (e *Env) supervision(ctx context.Context) Supervision {
	cfg := e.Config
	s := Supervision{BackendUnit: cfg.Backend.Unit, CanaryUnit: cfg.Canary.Unit, WatchdogService: units.WatchdogService,
		CurrentBinary: units.CurrentBinary(cfg.Install.Root), ReleasesDir: filepath.Join(cfg.Install.Root, "releases")}
	list, err := e.listUnits(ctx)
	if err != nil {
		s.ListErr = err
		return s
	}
	active := map[string]bool{}
	for _, u := range list {
		active[u.Name] = u.ActiveState == "active"
	}
	for _, u := range list {
		if u.LoadState != "loaded" || !strings.HasSuffix(u.Name, ".service") {
			continue
		}
		f := ServiceFact{Name: u.Name, ActiveState: u.ActiveState}
		f.Exec, f.Err = e.Systemd.ExecStart(ctx, u.Name)
		// Unknown enablement or triggers count as "not live" for that reason
		// alone; the active state still decides.
		f.UnitFileState, _ = e.Systemd.UnitFileState(ctx, u.Name)
		if by, err := e.Systemd.Strings(ctx, u.Name, "TriggeredBy"); err == nil {
			for _, t := range by {
				if active[t] {
					f.ActiveTriggers = append(f.ActiveTriggers, t)
				}
			}
		}
		s.Services = append(s.Services, f)
	}
	return s
}

func (e *Env) listUnits(ctx context.Context) ([]unitstate.Listed, error) {
	if e.Systemd == nil {
		return nil, errors.New("no unit lister configured")
	}
	return e.Systemd.ListUnits(ctx)
}
