package wiring

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/skyfold/syncular-lambda/internal/config"
)

// SecretKind says where a secret reference points.
type SecretKind int

const (
	SecretSSM SecretKind = iota + 1
	SecretsManager
)

// ClassifySecretRef tells a Secrets Manager ARN from an SSM parameter name
// or ARN (anything else).
func ClassifySecretRef(ref string) SecretKind {
	if strings.HasPrefix(ref, "arn:") && strings.Contains(ref, ":secretsmanager:") {
		return SecretsManager
	}
	return SecretSSM
}

// ResolveSecret reads a key once at init: an SSM SecureString (decrypted)
// or a Secrets Manager secret (string or binary). The value is never
// logged; errors name the reference only.
func ResolveSecret(ctx context.Context, awsCfg aws.Config, ref string) ([]byte, error) {
	var v []byte
	switch ClassifySecretRef(ref) {
	case SecretsManager:
		out, err := secretsmanager.NewFromConfig(awsCfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(ref)})
		if err != nil {
			return nil, fmt.Errorf("read secret %s: %w", ref, err)
		}
		if out.SecretString != nil {
			v = []byte(*out.SecretString)
		} else {
			v = out.SecretBinary
		}
	default:
		out, err := ssm.NewFromConfig(awsCfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(ref), WithDecryption: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("read SSM parameter %s: %w", ref, err)
		}
		if out.Parameter == nil || out.Parameter.Value == nil {
			return nil, fmt.Errorf("SSM parameter %s has no value", ref)
		}
		v = []byte(*out.Parameter.Value)
	}
	if len(v) < config.MinKeyBytes {
		return nil, fmt.Errorf("secret %s is shorter than %d bytes", ref, config.MinKeyBytes)
	}
	return v, nil
}

// ResolveKeys fills cfg's keys from their references.
func ResolveKeys(ctx context.Context, awsCfg aws.Config, cfg *config.Config) error {
	var errs []error
	if cfg.HS256SecretRef != "" {
		k, err := ResolveSecret(ctx, awsCfg, cfg.HS256SecretRef)
		if err != nil {
			errs = append(errs, fmt.Errorf("SYNC_HS256_SECRET_REF: %w", err))
		}
		cfg.HS256Secret = k
	}
	if cfg.SigningKeyRef != "" && cfg.SignedURLs == config.SignedNative {
		k, err := ResolveSecret(ctx, awsCfg, cfg.SigningKeyRef)
		if err != nil {
			errs = append(errs, fmt.Errorf("SYNC_SIGNING_KEY_REF: %w", err))
		}
		cfg.SigningKey = k
	}
	return errors.Join(errs...)
}
