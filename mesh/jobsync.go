package mesh

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
)

// Jobs of one dataset that train side by side share their reads only
// while they read the same part of an epoch at about the same time: the
// orders of an epoch are aligned (sampling.Align) and a job that begins
// an epoch the others are reading starts where they are (phase), but a
// faster job draws ahead epoch after epoch, and the part of its order a
// slower job reads after wrapping round was read by the faster one long
// before, so the cache must hold it meanwhile, and mostly cannot.
//
// With Config.JobSync the leader holds the next epoch of a job that
// finished an epoch while another job of the dataset is still training
// it and is expected to finish within JobSync of the job's own epoch
// time; the held epoch is published as soon as no such job is left (the
// leader releases it when another job of the dataset publishes), or when
// the wait has passed. The jobs then begin each epoch together, and a
// faster job waits at most JobSync of its epoch time per epoch.
//
// Where a job's orders run ahead its ranks hold the next epoch's order
// when they finish one, and the leader draws the epoch after it at once.
// The wait is then where they read: the leader answers each rank's done
// with it (wire.DoneResp), and the rank's node holds its order of the
// next epoch until each awaited job has begun that epoch too (its next
// order reached the node), or the wait has passed (awaitStart).

// syncHold is leader.Config.Hold for a job: how long the publication of
// its epoch, due now, waits for the dataset's other jobs still training
// the epoch before it, or 0 to publish now. Called with the job's
// leader.Job locked: it reads only the jobs' order books and progress.
func (n *Node) syncHold(js *jobState, epoch int) time.Duration {
	if epoch < 1 {
		return 0
	}
	wait, awaited := n.awaited(js, epoch-1)
	if len(awaited) == 0 {
		return 0
	}
	return wait
}

// aheadHold is, on the leader, the answer to a done of epoch by a rank
// of js, whose orders run ahead: how long the rank waits at most before
// it begins the next epoch, and for which jobs (see DoneResp); nil for no
// wait.
func (n *Node) aheadHold(js *jobState, epoch int) *wire.DoneResp {
	wait, awaited := n.awaited(js, epoch)
	if len(awaited) == 0 {
		return nil
	}
	resp := &wire.DoneResp{Wait: int64(wait)}
	for _, o := range awaited {
		resp.Jobs = append(resp.Jobs, o.name)
	}
	return resp
}

// awaited is what js, which finished epoch, waits for before it begins
// the next: the dataset's other jobs still training epoch that are
// expected to finish it within JobSync of js's own time for it, and that
// wait. None if jobs are not synchronised.
func (n *Node) awaited(js *jobState, epoch int) (time.Duration, []*jobState) {
	if n.cfg.JobSync <= 0 || n.cfg.IsolateJobs || n.cfg.Uniform || epoch < 0 {
		return 0, nil
	}
	now := time.Now()
	_, _, began, ok := js.progress(epoch)
	if !ok {
		return 0, nil
	}
	budget := time.Duration(n.cfg.JobSync * float64(now.Sub(began)))
	var out []*jobState
	for _, o := range js.ds.jobList() {
		if o == js || o.idle(now) > activeWithin {
			continue
		}
		if q := o.book.Newest(); q == nil || q.TrainingEpoch() != epoch {
			continue // not training the epoch this job finished
		}
		// A job that reported all of it is done or waits for its next
		// epoch too: waiting for it would wait for each other.
		if left, ok := o.timeLeft(now, epoch); ok && left > 0 && left <= budget {
			out = append(out, o)
		}
	}
	return budget, out
}

// holdStart notes the leader's answer to a done of epoch by a rank of js
// trained here: the rank's order of the next epoch waits for the jobs it
// names, until the wait has passed. Answers for one epoch add up.
func (js *jobState) holdStart(gen uint64, epoch int, resp *wire.DoneResp) {
	if resp == nil || resp.Wait <= 0 || len(resp.Jobs) == 0 {
		return
	}
	until := time.Now().Add(time.Duration(resp.Wait))
	js.startMu.Lock()
	defer js.startMu.Unlock()
	h := &js.start
	if h.gen != gen || h.epoch != epoch+1 {
		*h = startHold{gen: gen, epoch: epoch + 1}
	}
	if until.After(h.until) {
		h.until = until
	}
	for _, name := range resp.Jobs {
		if !slices.Contains(h.jobs, name) {
			h.jobs = append(h.jobs, name)
		}
	}
}

// startHold is a job's start of epoch of generation gen, held on the
// node of its ranks until each of the named jobs has begun it too, or
// until has passed.
type startHold struct {
	gen   uint64
	epoch int
	until time.Time
	jobs  []string
}

// awaitStart waits, before a rank of js begins reading order p, for the
// jobs its node was told to wait for (holdStart): until each of them
// trains p's epoch or a later one, is gone, or the wait has passed.
func (n *Node) awaitStart(ctx context.Context, js *jobState, p *wire.PublishMsg) error {
	js.startMu.Lock()
	h := js.start
	js.startMu.Unlock()
	epoch := p.Epoch
	if h.gen != p.Gen || h.epoch != epoch || len(h.jobs) == 0 {
		return nil
	}
	wait := time.Until(h.until)
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	began, held := time.Now(), false
	defer func() {
		if held {
			waited := time.Since(began)
			js.heldStarts.Add(1)
			js.heldStartNanos.Add(int64(waited))
			n.cfg.Logger.Debug().Str("dataset", js.ds.name).Str("job", displayJob(js.name)).Int("epoch", epoch).
				Strs("for", h.jobs).Dur("waited", waited).Msg("held a rank's start of an epoch for the dataset's other jobs")
		}
	}()
	for _, name := range h.jobs {
		for {
			o := js.ds.lookupJob(name)
			if o == nil {
				break
			}
			changed := o.book.Changes()
			if q := o.book.Newest(); q == nil || q.Epoch < 0 || q.TrainingEpoch() >= epoch {
				break // begun, reset or retired
			}
			held = true
			select {
			case <-changed:
			case <-timer.C:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("%w: epoch %d of %s job %s, waiting for job %s to begin it", ErrOrderTimeout, epoch, js.ds.name, displayJob(js.name), displayJob(name))
			}
		}
	}
	return nil
}

// timeLeft estimates how long the job needs to finish epoch, from the
// share of its order its trainers reported since the order was drawn (0
// once they reported all of it); ok is false if the job reported nothing
// of it yet, or its order of epoch was not drawn here.
func (js *jobState) timeLeft(now time.Time, epoch int) (time.Duration, bool) {
	p := js.book.Kept(epoch)
	if p == nil {
		return 0, false
	}
	total := p.Len()
	_, done, began, ok := js.progress(epoch)
	if !ok || done <= 0 || total == 0 {
		return 0, false
	}
	left := max(0, int64(total)-done)
	return time.Duration(float64(now.Sub(began)) * float64(left) / float64(done)), true
}

// releaseHeld lets the dataset's other jobs publish an epoch they hold,
// now that js published one (see syncHold). It runs in the background:
// js's leader.Job is locked while it publishes.
func (n *Node) releaseHeld(js *jobState) {
	if n.cfg.JobSync <= 0 || n.cfg.IsolateJobs {
		return
	}
	n.goBackground(func(context.Context) {
		for _, o := range js.ds.jobList() {
			if o == js {
				continue
			}
			if lj := o.leaderJob(); lj != nil {
				if err := lj.Release(); err != nil {
					n.cfg.Logger.Error().Err(err).Str("dataset", o.ds.name).Str("job", displayJob(o.name)).Msg("publishing a held epoch")
				}
			}
		}
	})
}
