package wiring

import (
	"time"

	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/s3segments"
)

// NewS3Segments returns the S3 segment store and presigner. The object
// lifetime it assumes is the bucket's lifecycle rule (SYNC_SEGMENT_OBJECT_DAYS,
// the same template parameter), so a publication never outlives its object.
func NewS3Segments(c *AWSClients, cfg *config.Config) *s3segments.Segments {
	return s3segments.New(c.S3, cfg.Bucket, "", c.DynamoDB, cfg.TableName, s3segments.Options{
		ObjectLifetime: time.Duration(cfg.SegmentObjectDays) * 24 * time.Hour,
	})
}
