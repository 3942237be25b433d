package app

import (
	"errors"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// newS3Segments is replaced once internal/s3segments lands.
func newS3Segments(_ *AWSClients, _ *config.Config) (store.SegmentStore, store.Presigner, error) {
	return nil, nil, errors.New("internal/s3segments is not available yet")
}
