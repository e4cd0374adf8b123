package report

import (
	"time"

	"github.com/m2ho/m2ho/test/traffic"
)

// RampPhase is the part of the throughput window right after execution
// that Phases keep apart: the second in which a post-handover ramp
// raises its clamp round by round.
const RampPhase = time.Second

// Phases are the bytes a handover's throughput window delivered, split
// where m2ho's clamps change: before the handover began (the clamps of
// earlier handovers and of predictions nothing followed), from its
// beginning to its execution (the Preparation clamp), the RampPhase after
// the execution, and the rest of the window.
type Phases struct {
	BeforeReport float64 `json:"before_report"`
	Preparation  float64 `json:"preparation"`
	AfterExec    float64 `json:"after_exec"`
	Later        float64 `json:"later"`
}

// Add sums two handovers' phases.
func (p Phases) Add(o Phases) Phases {
	return Phases{
		BeforeReport: p.BeforeReport + o.BeforeReport, Preparation: p.Preparation + o.Preparation,
		AfterExec: p.AfterExec + o.AfterExec, Later: p.Later + o.Later,
	}
}

// splitPhases splits [from, to] at began and exec, each clipped to the
// window; a phase outside it delivers nothing.
func splitPhases(m *traffic.Measurements, from, began, exec, to time.Duration) Phases {
	edge := func(t time.Duration) time.Duration { return min(max(t, from), to) }
	bytes := func(a, b time.Duration) float64 { return max(bytesAt(m, edge(b))-bytesAt(m, edge(a)), 0) }
	began = min(began, exec)
	return Phases{
		BeforeReport: bytes(from, began),
		Preparation:  bytes(began, exec),
		AfterExec:    bytes(exec, exec+RampPhase),
		Later:        bytes(exec+RampPhase, to),
	}
}
