package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The migration step on a stack's first deploy (template.yaml
// MigrateOnCreate, a CloudFormation custom resource served by the hook
// function).
//
// CloudFormation creates a new stack's aliases without a CodeDeploy
// deployment, so the post-traffic hook does not run and the table would
// keep schema marker 0 and store-format level 0 (every commit in a
// transaction, uncompressed log bodies) until the second deploy or a
// manual syncular-admin migrate. No older build serves a table the stack
// has just created, so on Create the custom resource runs the step the
// hook runs. It is safe beyond a fresh stack too: its properties
// reference every function's alias, so CloudFormation creates it only
// once all of them point at this build (on the update that adds it to an
// existing stack, after their CodeDeploy deployments have shifted the
// traffic), exactly when the hook would run; the realtime tier's old
// tasks hold the level back as they hold the hook's (dynamostore
// tierlevel.go). The template declares it only when the stack creates
// its table (another stack's older build may serve an existing one).
// Update and Delete do nothing: later deploys have the hook.

// customResourceEvent is what CloudFormation sends a custom resource's
// function (the fields the hook uses).
type customResourceEvent struct {
	RequestType        string `json:"RequestType"`
	ResponseURL        string `json:"ResponseURL"`
	StackID            string `json:"StackId"`
	RequestID          string `json:"RequestId"`
	LogicalResourceID  string `json:"LogicalResourceId"`
	PhysicalResourceID string `json:"PhysicalResourceId,omitempty"`
}

// customResourceResponse is the document PUT to the event's ResponseURL.
type customResourceResponse struct {
	Status             string         `json:"Status"`
	Reason             string         `json:"Reason,omitempty"`
	PhysicalResourceID string         `json:"PhysicalResourceId"`
	StackID            string         `json:"StackId"`
	RequestID          string         `json:"RequestId"`
	LogicalResourceID  string         `json:"LogicalResourceId"`
	Data               map[string]any `json:"Data,omitempty"`
}

// migrateOnCreateID is the custom resource's physical id: one per stack,
// never replaced.
const migrateOnCreateID = "syncular-migrate-on-create"

// HookRequest is any event the hook function receives: a CodeDeploy
// lifecycle event, a manual run ({}), or a CloudFormation custom
// resource request (RequestType set).
type HookRequest struct {
	HookEvent
	customResourceEvent
}

// Handle is the hook function's handler.
func (h *MigrateHook) Handle(ctx context.Context, req HookRequest) (HookResult, error) {
	if req.RequestType == "" {
		return h.Run(ctx, req.HookEvent)
	}
	return h.customResource(ctx, req.customResourceEvent)
}

// customResource answers a CloudFormation request: on Create it runs the
// step as a manual run does; it always answers SUCCESS. A step that
// failed leaves the marker and the level where they were (the older
// formats, which every build reads): failing the resource would roll
// back the stack's creation, or, on the update that adds it, roll back
// the functions past the step. The run's error is in its log line (error
// level), the response's Reason and the result.
func (h *MigrateHook) customResource(ctx context.Context, ev customResourceEvent) (HookResult, error) {
	res := HookResult{Status: "Succeeded"}
	if ev.ResponseURL == "" {
		return res, fmt.Errorf("migrate hook: CloudFormation %s request without ResponseURL", ev.RequestType)
	}
	resp := customResourceResponse{Status: "SUCCESS", PhysicalResourceID: ev.PhysicalResourceID,
		StackID: ev.StackID, RequestID: ev.RequestID, LogicalResourceID: ev.LogicalResourceID}
	if ev.RequestType == "Create" {
		resp.PhysicalResourceID = migrateOnCreateID
		var err error
		if res, err = h.Run(ctx, HookEvent{}); err != nil {
			return res, err
		}
		resp.Data = map[string]any{"Marker": res.Marker, "FormatLevel": res.FormatLevel}
		if res.Error != "" {
			resp.Reason = "migration step not done (the next deploy's hook or syncular-admin migrate does it): " + res.Error
		}
	}
	if resp.PhysicalResourceID == "" {
		resp.PhysicalResourceID = migrateOnCreateID
	}
	if err := h.respond(ctx, ev.ResponseURL, resp); err != nil {
		// An error result makes Lambda retry the asynchronous invocation:
		// the step is idempotent and the response is sent again.
		return res, err
	}
	return res, nil
}

// respond PUTs the response to CloudFormation's presigned URL (signed
// for no content type), with time of its own when the invocation's
// context is nearly spent.
func (h *MigrateHook) respond(ctx context.Context, url string, resp customResourceResponse) error {
	body, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("migrate hook: encode CloudFormation response: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("migrate hook: CloudFormation response request: %w", err)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("migrate hook: send CloudFormation response: %w", err)
	}
	r.Body.Close()
	if r.StatusCode/100 != 2 {
		return fmt.Errorf("migrate hook: CloudFormation response answered %s", r.Status)
	}
	return nil
}
