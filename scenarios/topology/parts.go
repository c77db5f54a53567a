package topology

import (
	"errors"
	"fmt"
)

// Key picks the part a backend plays a node with: its component and the process that holds it (a FUSE
// server in the plugin is not played as one in the keeper).
type Key struct {
	Component Component
	Holder    Holder
}

// ErrUnsupported is what a part answers for a step it cannot take.
var ErrUnsupported = errors.New("unsupported")

// Parts are the parts a backend made for one run, one per node of its topology: P is the backend's own
// interface of a part, the same machinery serving both backends.
type Parts[P any] struct {
	backend string
	t       *Topology
	by      map[Component]P
	order   []P
}

// Build makes a run's parts: for each node of t, in order, the constructor kinds has for its key, called with
// make (which hands it the backend and what else it needs). A node the backend has no part for is left out: a
// step on it fails, naming it (a row that needs it says which backends can run it).
func Build[P, C any](backend string, t *Topology, kinds map[Key]C, make func(C) (P, error)) (*Parts[P], error) {
	ps := &Parts[P]{backend: backend, t: t, by: map[Component]P{}}
	for _, n := range t.Nodes {
		k, ok := kinds[Key{n.Component, n.Holder}]
		if !ok {
			continue
		}
		p, err := make(k)
		if err != nil {
			return nil, fmt.Errorf("%s backend: %s: %w", backend, n.Component.Noun(), err)
		}
		ps.by[n.Component] = p
		ps.order = append(ps.order, p)
	}
	return ps, nil
}

// All are the parts in the topology's order.
func (ps *Parts[P]) All() []P {
	if ps == nil {
		return nil
	}
	return ps.order
}

// Step hands verb v on component c to its part (do calls the part's method).
func (ps *Parts[P]) Step(c Component, v Verb, do func(P) error) error {
	if ps == nil {
		return fmt.Errorf("cannot %s %s: nothing is set up", v, c)
	}
	p, ok := ps.by[c]
	if !ok {
		if n, in := ps.t.Node(c); in {
			return fmt.Errorf("%s backend: cannot %s %s: no part plays the %s in the %s", ps.backend, v, c, c.Noun(), n.Holder)
		}
		return fmt.Errorf("%s backend: cannot %s %s: the scenario has none", ps.backend, v, c)
	}
	if err := do(p); !errors.Is(err, ErrUnsupported) {
		return err
	}
	return fmt.Errorf("%s backend: cannot %s %s", ps.backend, v, c)
}

// Has reports whether there is a part for component c.
func (ps *Parts[P]) Has(c Component) bool {
	_, ok := ps.by[c]
	return ok
}
