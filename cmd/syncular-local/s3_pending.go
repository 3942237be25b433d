package main

import (
	"context"
	"errors"

	"github.com/skyfold/syncular-lambda/internal/app"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// localS3Segments is replaced once internal/s3segments lands.
func localS3Segments(_ context.Context, _ *app.AWSClients, _ *config.Config, _ bool) (store.SegmentStore, store.Presigner, error) {
	return nil, nil, errors.New("internal/s3segments is not available yet")
}
