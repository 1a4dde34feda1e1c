// Package admin is a shade-peer's operations listener: Prometheus metrics,
// liveness and readiness probes, and the Go profiler, over HTTP.
//
//	/metrics        Prometheus text format, read from the node at scrape time
//	/healthz        200 while the process serves HTTP
//	/readyz         200 while the node serves its datasets, else 503
//	/debug/pprof/   net/http/pprof
//
// Every Server has its own mux and its own Prometheus registry; nothing is
// registered globally, so several servers can run in one process.
package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/transport/peer"
)

// DefaultAddr is the daemon's default admin address: loopback only, since
// pprof and the metrics are not authenticated.
const DefaultAddr = "127.0.0.1:9746"

// Config configures the admin listener.
type Config struct {
	// Addr is the TCP address to listen on, host:port (port 0 picks one).
	// "" or "off" disables the listener; the daemon's flag defaults to
	// DefaultAddr.
	Addr string
	// Clients, when set, adds the trainer socket's client-memory and
	// refusal metrics.
	Clients ClientSource
	// Logger receives the listener's events; the zero Logger is silent.
	Logger zerolog.Logger
}

// Disabled reports whether c turns the listener off.
func (c Config) Disabled() bool { return c.Addr == "" || c.Addr == "off" }

// Source is what the admin listener reads from a node. *mesh.Node
// implements it. Its methods are called concurrently, at every scrape and
// probe, and must not block for long.
type Source interface {
	// Snapshot returns the node's counters (what SHADE.STATS serves).
	Snapshot() stats.Node
	// PeerStats returns the QUIC counters per peer address; nil when
	// standalone.
	PeerStats() map[string]peer.PeerStats
	// Ready reports whether the node serves its datasets.
	Ready() bool
}

var _ Source = (*mesh.Node)(nil)

// Server is a running admin listener. Its methods are safe for concurrent
// use.
type Server struct {
	ln   net.Listener // nil when disabled
	srv  *http.Server
	done chan struct{} // closed when Serve returns
	log  zerolog.Logger

	closeOnce sync.Once
	closeErr  error
	serveErr  error // set before done is closed
}

// shutdownGrace is how long Close lets in-flight requests (a scrape, a CPU
// profile) finish before it drops their connections.
const shutdownGrace = 5 * time.Second

// Listen binds cfg.Addr and serves the admin endpoints for src until Close.
// With cfg.Addr "" or "off" it binds nothing and returns a Server whose
// Addr is "" and whose Close does nothing.
func Listen(cfg Config, src Source) (*Server, error) {
	if cfg.Disabled() {
		return &Server{log: cfg.Logger}, nil
	}
	if src == nil {
		return nil, errors.New("admin: nil source")
	}
	h, err := newHandler(src, cfg.Clients, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{
		ln:   ln,
		done: make(chan struct{}),
		log:  cfg.Logger,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			// No WriteTimeout: /debug/pprof/profile and /trace stream for
			// as long as the request asks.
		},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
			s.log.Error().Err(err).Str("addr", s.Addr()).Msg("admin listener stopped")
		}
	}()
	s.log.Info().Str("addr", s.Addr()).Msg("admin listener: /metrics /healthz /readyz /debug/pprof/")
	return s, nil
}

// Addr returns the address the server listens on, with the port it got;
// "" when disabled.
func (s *Server) Addr() string {
	if s == nil || s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops accepting, lets in-flight requests finish for a few seconds,
// then drops their connections, and waits for the serving goroutine. Later
// calls return the first call's result; so does a nil Server.
func (s *Server) Close() error {
	if s == nil || s.ln == nil {
		return nil
	}
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			// Requests still running past the grace: cut them off.
			s.srv.Close()
		}
		<-s.done
		s.closeErr = s.serveErr
	})
	return s.closeErr
}

// newHandler builds the mux: a private registry holding the node's
// collector and the Go runtime and process collectors.
func newHandler(src Source, clients ClientSource, log zerolog.Logger) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		newCollector(src),
		newBoundsCollector(clients, src),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: registering metrics: %w", err)
		}
	}
	metrics := promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      errorLog{log},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	}))

	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !src.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "shade-peer admin: /metrics /healthz /readyz /debug/pprof/")
	})
	return mux, nil
}

// errorLog passes promhttp's errors (a metric that failed to gather or
// encode) to the logger.
type errorLog struct{ log zerolog.Logger }

func (l errorLog) Println(v ...any) { l.log.Error().Msg(fmt.Sprint(v...)) }
