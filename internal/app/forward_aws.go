package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// LambdaInvoker is the Invoker of the Lambda API: a RequestResponse
// Invoke of the qualified function version. The template lets each sync
// function invoke its own versions only (lambda:InvokeFunction on
// <function ARN>:*).
type LambdaInvoker struct{ Client *lambda.Client }

// Invoke implements Invoker.
func (l LambdaInvoker) Invoke(ctx context.Context, function, version string, payload []byte) ([]byte, string, error) {
	out, err := l.Client.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(function),
		Qualifier:      aws.String(version),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	})
	if err != nil {
		return nil, "", fmt.Errorf("invoke %s:%s: %w", function, version, err)
	}
	return out.Payload, aws.ToString(out.FunctionError), nil
}

// lambdaForwarder is the Forwarder of the running Lambda function
// version, registered in the build registry; nil when forwarding is off
// (SYNC_FORWARD=off), the version is unpublished ($LATEST), the store
// has no registry or fn serves no sync route (segment and blob requests
// are not behind the serve gate, so nothing there is ever forwarded). A failed registration is logged, not fatal: this
// build then serves as it would without forwarding, and no older build
// forwards to it.
func lambdaForwarder(ctx context.Context, cfg *config.Config, f Function, d Deps, awsCfg aws.Config, logger *slog.Logger) *Forwarder {
	name, ver := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), os.Getenv("AWS_LAMBDA_FUNCTION_VERSION")
	reg, ok := d.Store.(store.BuildRegistry)
	gated := f.Routes&(httpapi.RouteSync|httpapi.RoutePush|httpapi.RoutePull) != 0
	if !cfg.Forward || !ok || !gated || !ForwardingEnabled(name, ver) {
		return nil
	}
	client := lambda.NewFromConfig(awsCfg, func(o *lambda.Options) {
		if cfg.LambdaEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.LambdaEndpoint)
		}
	})
	fwd := &Forwarder{Function: name, Version: ver, SchemaVersion: int64(d.Schema.Latest), Builds: reg, Invoker: LambdaInvoker{Client: client}, Logger: logger}
	if err := fwd.Register(ctx); err != nil && logger != nil {
		logger.Warn("build registration failed; older builds cannot forward here", "error", err.Error())
	}
	return fwd
}
