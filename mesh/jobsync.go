package mesh

import (
	"context"
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

// syncHold is leader.Config.Hold for a job: how long the publication of
// its epoch, due now, waits for the dataset's other jobs still training
// the epoch before it, or 0 to publish now. Called with the job's
// leader.Job locked: it reads only the jobs' order books and progress.
func (n *Node) syncHold(js *jobState, epoch int) time.Duration {
	if n.cfg.JobSync <= 0 || n.cfg.IsolateJobs || n.cfg.Uniform || epoch < 1 {
		return 0
	}
	now := time.Now()
	prev := epoch - 1
	_, _, began, ok := js.progress(prev)
	if !ok {
		return 0
	}
	budget := time.Duration(n.cfg.JobSync * float64(now.Sub(began)))
	for _, o := range js.ds.jobList() {
		if o == js || o.idle(now) > activeWithin {
			continue
		}
		if q := o.book.Newest(); q == nil || q.Epoch-q.Ahead != prev {
			continue // not training the epoch this job finished
		}
		// A job that reported all of it is done or holds its next epoch
		// too: waiting for it would wait for each other.
		if left, ok := o.timeLeft(now, prev); ok && left > 0 && left <= budget {
			return budget
		}
	}
	return 0
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
	total := orderSize(p)
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

// orderSize is the number of reads in an order: all its ranks' slices.
func orderSize(p *wire.PublishMsg) int {
	total := 0
	for _, s := range p.Slices {
		total += len(s)
	}
	return total
}
