// Package rtaws runs the realtime channel (§8) on AWS: API Gateway
// WebSocket connections registered in the sync table, a fanout driven by
// the table's stream, and the API Gateway management API to reach
// connections. The per-connection decisions (registrations, deltas in
// the client's wire version, wake-ups, acks) are the engine's, as in the
// in-process hub (internal/core/realtime); this package only keeps the
// state a stateless Lambda cannot hold in memory.
package rtaws

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// ErrGone means the connection no longer exists (API Gateway's
// GoneException, HTTP 410): its items are deleted.
var ErrGone = errors.New("rtaws: connection gone")

// Poster sends one message to a connection.
type Poster interface {
	Post(ctx context.Context, connectionID string, data []byte) error
}

// Mgmt is a client of the API Gateway management API
// (POST/DELETE <endpoint>/@connections/{id}), signed with SigV4 for the
// execute-api service. The SDK's apigatewaymanagementapi module is not
// needed for two calls.
type Mgmt struct {
	// Endpoint is https://{api-id}.execute-api.{region}.amazonaws.com/{stage}.
	Endpoint    string
	Region      string
	Credentials aws.CredentialsProvider // nil sends unsigned requests (tests)
	HTTP        *http.Client
	signer      *v4.Signer
}

// NewMgmt returns a management API client.
func NewMgmt(endpoint, region string, creds aws.CredentialsProvider) *Mgmt {
	return &Mgmt{Endpoint: strings.TrimRight(endpoint, "/"), Region: region, Credentials: creds, HTTP: &http.Client{Timeout: 10 * time.Second}, signer: v4.NewSigner()}
}

// Post is PostToConnection.
func (m *Mgmt) Post(ctx context.Context, id string, data []byte) error {
	return m.call(ctx, http.MethodPost, id, data)
}

// Delete is DeleteConnection (a policy close).
func (m *Mgmt) Delete(ctx context.Context, id string) error {
	return m.call(ctx, http.MethodDelete, id, nil)
}

func (m *Mgmt) call(ctx context.Context, method, id string, data []byte) error {
	u := m.Endpoint + "/@connections/" + url.PathEscape(id)
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(data))
	if err != nil {
		return err
	}
	if m.Credentials != nil {
		creds, err := m.Credentials.Retrieve(ctx)
		if err != nil {
			return fmt.Errorf("rtaws: credentials: %w", err)
		}
		sum := sha256.Sum256(data)
		if m.signer == nil {
			m.signer = v4.NewSigner()
		}
		if err := m.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", m.Region, time.Now()); err != nil {
			return fmt.Errorf("rtaws: sign: %w", err)
		}
	}
	resp, err := m.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("rtaws: %s @connections: %w", method, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusGone:
		return ErrGone
	case resp.StatusCode >= 300:
		return fmt.Errorf("rtaws: %s @connections: HTTP %d: %s", method, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
