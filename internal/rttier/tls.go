package rttier

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/wiring"
)

// certRenewWarning is how close to its expiry a served certificate gets
// before every reload logs a warning.
const certRenewWarning = 14 * 24 * time.Hour

// certSecret is the JSON form of SYNC_TLS_CERT_REF's value.
type certSecret struct {
	Certificate string `json:"certificate"`
	PrivateKey  string `json:"privateKey"`
}

// parseCertificate reads a certificate chain and its private key from a
// secret's value: JSON {"certificate": PEM chain, "privateKey": PEM key},
// or one PEM text holding both (fullchain.pem followed by privkey.pem).
// The leaf must be valid now. Errors never quote the value.
func parseCertificate(v []byte, now time.Time) (*tls.Certificate, error) {
	certPEM, keyPEM := v, v
	if trimmed := bytes.TrimSpace(v); len(trimmed) > 0 && trimmed[0] == '{' {
		var s certSecret
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return nil, errors.New(`not valid JSON (want {"certificate": "<PEM chain>", "privateKey": "<PEM key>"})`)
		}
		if s.Certificate == "" || s.PrivateKey == "" {
			return nil, errors.New(`JSON without "certificate" or "privateKey"`)
		}
		certPEM, keyPEM = []byte(s.Certificate), []byte(s.PrivateKey)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls names the missing or mismatched part, never the key.
		return nil, fmt.Errorf("not a PEM certificate chain with its private key: %w", err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("leaf certificate: %w", err)
		}
		cert.Leaf = leaf
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("certificate for %v is valid from %s to %s, not now", leaf.DNSNames, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}

// certReloader serves the certificate of SYNC_TLS_CERT_REF and re-reads
// it every interval, so a renewed certificate (put-secret-value, an SSM
// parameter update) is served to new connections without a restart.
// Open connections keep the certificate they were made with.
type certReloader struct {
	ref      string
	read     func(context.Context) ([]byte, error)
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time
	cur      atomic.Pointer[tls.Certificate]
}

// load reads and parses the secret once; the current certificate changes
// only when the new one is good.
func (r *certReloader) load(ctx context.Context) error {
	v, err := r.read(ctx)
	if err != nil {
		return err
	}
	cert, err := parseCertificate(v, r.now())
	if err != nil {
		return fmt.Errorf("SYNC_TLS_CERT_REF %s: %w", r.ref, err)
	}
	prev := r.cur.Swap(cert)
	leaf := cert.Leaf
	if prev == nil || !bytes.Equal(prev.Certificate[0], cert.Certificate[0]) {
		r.log.Info("realtime: TLS certificate loaded", "names", leaf.DNSNames, "serial", leaf.SerialNumber.String(),
			"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339), "chain", len(cert.Certificate))
	}
	if left := leaf.NotAfter.Sub(r.now()); left < certRenewWarning {
		r.log.Warn("realtime: TLS certificate expires soon; put the renewed one into the secret", "ref", r.ref,
			"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// run re-reads the secret every interval until ctx ends. A failed read
// or a bad value is logged and the current certificate stays.
func (r *certReloader) run(ctx context.Context) {
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := r.load(rctx); err != nil && ctx.Err() == nil {
				r.log.Error("realtime: TLS certificate not reloaded; serving the current one", "error", err.Error())
			}
			cancel()
		}
	}
}

// tlsConfig ends TLS 1.2+ with the current certificate. ALPN offers
// http/1.1 only: the WebSocket upgrade is an HTTP/1.1 request.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.cur.Load(), nil
		},
	}
}

// ListenRealtime opens the realtime port (cfg.RealtimeAddr). With
// SYNC_TLS_CERT_REF it reads the certificate first (a missing or bad one
// is the error: the task never starts serving without it), ends TLS on
// the port, and re-reads the certificate every SYNC_TLS_RELOAD_INTERVAL
// until ctx ends.
func ListenRealtime(ctx, initCtx context.Context, cfg *config.Config, awsCfg aws.Config, logger *slog.Logger) (net.Listener, error) {
	var certs *certReloader
	if cfg.TLSCertRef != "" {
		certs = &certReloader{
			ref: cfg.TLSCertRef, interval: cfg.TLSReloadInterval, log: logger, now: time.Now,
			read: func(ctx context.Context) ([]byte, error) { return wiring.ResolveSecret(ctx, awsCfg, cfg.TLSCertRef) },
		}
		if err := certs.load(initCtx); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.RealtimeAddr)
	if err != nil {
		return nil, fmt.Errorf("SYNC_REALTIME_ADDR %s: %w", cfg.RealtimeAddr, err)
	}
	if certs == nil {
		return ln, nil
	}
	go certs.run(ctx)
	return tls.NewListener(ln, certs.tlsConfig()), nil
}
