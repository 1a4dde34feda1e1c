package leader

import (
	"fmt"
	"sort"

	"github.com/shade-mesh/shade/mesh/wire"
)

// States are what the other members answered a new leader's StateReq, by
// member name. Where two members tie, the lower name wins.
type States map[string]*wire.StateResp

func (s States) names() []string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// NewestOrder returns the member that holds the newest whole order of
// own's dataset, if it is newer than the one this node holds (own, what
// this node knows of the job), or the whole of it where this node holds
// its part; "" if none is. A member's part of an order (JobState.Part)
// cannot be adopted.
func (s States) NewestOrder(own wire.JobState) (from string) {
	best := orderOf(own)
	for _, name := range s.names() {
		for _, js := range s[name].Jobs {
			if js.Dataset != own.Dataset || js.Job != own.Job || js.Part {
				continue
			}
			if cand := orderOf(js); cand.Newer(best) {
				best, from = cand, name
			}
		}
	}
	return from
}

// orderOf stands for the newest order js says its member holds, for
// Newer.
func orderOf(js wire.JobState) *wire.PublishMsg {
	p := &wire.PublishMsg{Gen: js.Gen, Epoch: js.Epoch, Term: js.Term}
	if js.Part {
		p.Part = "held"
	}
	return p
}

// BestTable returns the best score table of own's dataset and job that a
// member holds, if it is better than own (wire.TableInfo.Better), and that
// member; own and "" if none is.
func (s States) BestTable(own wire.TableInfo) (best wire.TableInfo, from string) {
	best = own
	for _, name := range s.names() {
		for _, ti := range s[name].Tables {
			if ti.Dataset == own.Dataset && ti.Job == own.Job && ti.Better(best) {
				best, from = ti, name
			}
		}
	}
	return best, from
}

// MaxTerm is the highest term any member has seen, at least floor.
func (s States) MaxTerm(floor uint64) uint64 {
	for _, st := range s {
		floor = max(floor, st.MaxTerm)
	}
	return floor
}

// Rebuild makes a new leader's job from the newest order this node holds
// (nil for none), what this node (self) knows of the job (own) and what
// the other members report: the generation, epoch, world and rank nodes
// of the newest order, the sampler's state after it, and, from every node
// that holds that same order, where its ranks train and which finished.
// A member's world out of 1..MaxWorld is skipped. The job is usable even
// if it returns an error: the newest order's sampler state was refused,
// or this node holds only its part of the newest order (which no member
// held whole), and the sampler starts afresh.
func Rebuild(cfg Config, newest *wire.PublishMsg, self string, own wire.JobState, peers States) (*Job, error) {
	j := New(cfg)
	var err error
	if newest != nil {
		j.gen, j.world, j.latest = newest.Gen, newest.World, newest.Epoch
		j.ranks = make([]string, newest.World)
		copy(j.ranks, newest.Ranks)
		switch {
		case newest.Epoch >= 0 && newest.Part != "":
			// No member held the newest order whole (States.NewestOrder):
			// this node's part of it carries no sampler state.
			err = fmt.Errorf("leader: only this node's part of epoch %d's order of %s is held, without the sampler's state", newest.Epoch, cfg.Dataset)
			j.ahead = newest.Ahead
		case newest.Epoch >= 0:
			err = j.sampler.UnmarshalBinary(newest.Sampler)
			// The ranks' dones mean what the newest order's Ahead says;
			// Config.Ahead, where more, takes over at the next epoch.
			j.ahead = newest.Ahead
		}
	}
	j.merge(self, own)
	for _, name := range peers.names() {
		for _, js := range peers[name].Jobs {
			if js.Dataset == cfg.Dataset && js.Job == cfg.Job {
				j.merge(name, js)
			}
		}
	}
	return j, err
}

// merge adds what node reports of the job, if it holds the job's newest
// order. Only Rebuild calls it, before the job is shared.
func (j *Job) merge(node string, js wire.JobState) {
	if js.Gen != j.gen || js.Epoch != j.latest {
		return
	}
	for _, rw := range js.Ranks {
		if rw.World < 1 || rw.World > j.cfg.MaxWorld {
			continue
		}
		if j.world == 0 {
			j.world, j.ranks = rw.World, make([]string, rw.World)
		}
		if rw.World == j.world && rw.Rank >= 0 && rw.Rank < j.world {
			j.ranks[rw.Rank] = node
		}
	}
	if j.latest < 0 {
		return
	}
	// js.Done finished the newest epoch, js.DonePrev the one before.
	newest, prev := j.done, map[int]bool(nil)
	if j.ahead > 0 {
		newest, prev = j.early, j.done
	}
	for _, r := range js.Done {
		if r >= 0 && r < j.world {
			newest[r] = true
		}
	}
	for _, r := range js.DonePrev {
		if prev != nil && r >= 0 && r < j.world {
			prev[r] = true
		}
	}
}

// Resume publishes what a rebuilt job has due: with Ahead, the epochs
// the old leader had not yet published ahead; the next epoch if every
// rank finished the one being trained; epoch 0 if every rank has joined,
// or epoch 0 JoinWait from now if some ranks have. A retired job
// publishes nothing.
func (j *Job) Resume() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.retired:
	case j.world > 0 && j.latest >= 0:
		for j.latest < j.ahead || len(j.done) == j.world {
			if err := j.publishLocked(j.latest + 1); err != nil {
				return err
			}
		}
	case j.world > 0 && j.latest < 0:
		if len(j.missingLocked()) == 0 {
			return j.publishFirstLocked()
		}
		j.armJoinWaitLocked()
	}
	return nil
}
