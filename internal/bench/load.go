package bench

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Spinners keep threads busy beside a benchmark, a CPU-bound loop each on its own OS thread, until Stop: the
// loaded mode of make bench (LOAD=1), one per core, as a node whose workloads keep every core busy. A FUSE
// server there waits for a core whenever a request wakes it; the figures that hold only on an idle machine
// are not the ones users get.
type Spinners struct {
	stop atomic.Bool
	wg   sync.WaitGroup
	sink atomic.Uint64 // the loops' results, kept so that the compiler keeps the loops
}

// Spin starts n spinning threads.
func Spin(n int) *Spinners {
	s := &Spinners{}
	for range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			runtime.LockOSThread() // a thread of its own for the scheduler, as another process's would be
			x := uint64(1)
			for !s.stop.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			s.sink.Add(x)
		}()
	}
	return s
}

// Stop ends the spinning threads and waits for them.
func (s *Spinners) Stop() {
	s.stop.Store(true)
	s.wg.Wait()
}
