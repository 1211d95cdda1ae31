package liveness

import "fmt"

// Entries reports how many keys m watches and how many expiries its timer
// heap holds. For testing.
func Entries(m *Monitor) (keys, scheduled int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys), len(m.due)
}

// Expire does now what m's timer does when it fires. For testing: with a
// fake clock the timer waits the clock's distance in real time.
func Expire(m *Monitor) { m.expire() }

// CheckHeap reports the first broken invariant of m's timer heap: every
// entry is a watched key that knows its position, no child comes before
// its parent, and every watched key is in the heap exactly where its
// position says, or marked unscheduled. For testing.
func CheckHeap(m *Monitor) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.due {
		switch {
		case k.index != i:
			return fmt.Errorf("heap entry %d (%v) has index %d", i, k.id, k.index)
		case m.keys[k.id] != k:
			return fmt.Errorf("heap entry %d (%v) is not a watched key", i, k.id)
		case i > 0 && k.deadline.Before(m.due[(i-1)/2].deadline):
			return fmt.Errorf("heap entry %d (%v) is due before its parent", i, k.id)
		}
	}
	for id, k := range m.keys {
		switch {
		case len(k.watchers) == 0:
			return fmt.Errorf("key %v is kept with no watcher", id)
		case k.index >= len(m.due) || k.index >= 0 && m.due[k.index] != k:
			return fmt.Errorf("key %v has index %d, not its heap position", id, k.index)
		}
	}
	return nil
}
