package app

import "github.com/skyfold/syncular-lambda/internal/wiring"

// The runtime-neutral wiring (configuration → AWS clients → dependencies →
// engine, and the authenticators) lives in internal/wiring, which the
// realtime tier imports without linking the Lambda runtime. These names
// keep the Lambda mains and their callers unchanged.
type (
	Deps       = wiring.Deps
	AWSClients = wiring.AWSClients
	SecretKind = wiring.SecretKind
)

const (
	SecretSSM      = wiring.SecretSSM
	SecretsManager = wiring.SecretsManager
)

var (
	NewAWSClients         = wiring.NewAWSClients
	NewAWS                = wiring.NewAWS
	NewEngine             = wiring.NewEngine
	NewS3Segments         = wiring.NewS3Segments
	Authenticator         = wiring.Authenticator
	RealtimeAuthenticator = wiring.RealtimeAuthenticator
	DynamoMeter           = wiring.DynamoMeter
	ClassifySecretRef     = wiring.ClassifySecretRef
	ResolveSecret         = wiring.ResolveSecret
	loadSchema            = wiring.LoadSchema
)
