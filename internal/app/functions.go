// Package app wires a deployable function from configuration: schema,
// stores, signed URLs, authentication and scope resolution around the
// engine, behind the API Gateway adapter. The Lambda mains and the local
// runner build their handlers here, so both serve through identical code.
package app

import (
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/httpapi"
)

// Endpoint is one API Gateway route: method and path in template syntax
// ({name} matches one path segment), relative to the mount.
type Endpoint struct {
	Method string
	Path   string
}

// Function is one Lambda function of the deployment. The table below is
// the route source of truth: template.yaml is tested against it and the
// local runner dispatches by it.
type Function struct {
	// Name is the short name used in logs ("push").
	Name string
	// LogicalID is the function's resource name in template.yaml.
	LogicalID string
	// Dir is the main package, relative to the module root (the CodeUri
	// holds the Makefile; SAM calls build-<LogicalID>).
	Dir       string
	Routes    httpapi.Route
	Endpoints []Endpoint
}

// The three functions (DESIGN.md "Routes and functions"). Splitting them
// gives least-privilege IAM and separate memory and concurrency settings;
// all three serve through the same engine.
var (
	Push = Function{
		Name: "push", LogicalID: "PushFunction", Dir: "functions/push",
		Routes:    httpapi.RouteSync | httpapi.RoutePush,
		Endpoints: []Endpoint{{"POST", "/sync"}, {"POST", "/push"}},
	}
	Pull = Function{
		Name: "pull", LogicalID: "PullFunction", Dir: "functions/pull",
		Routes:    httpapi.RoutePull,
		Endpoints: []Endpoint{{"POST", "/pull"}},
	}
	Segment = Function{
		Name: "segment", LogicalID: "SegmentFunction", Dir: "functions/segment",
		Routes:    httpapi.RouteSegments,
		Endpoints: []Endpoint{{"GET", "/segments/{segmentId}"}},
	}
	// Blob serves §5.9 uploads, upload grants and downloads; its IAM is
	// scoped to the bucket's blobs/ prefix.
	Blob = Function{
		Name: "blob", LogicalID: "BlobFunction", Dir: "functions/blob",
		Routes: httpapi.RouteBlobs,
		Endpoints: []Endpoint{
			{"PUT", "/blobs/{blobId}"}, {"GET", "/blobs/{blobId}"}, {"POST", "/blobs/{blobId}/upload-grant"},
		},
	}
	Functions = []Function{Push, Pull, Segment, Blob}
)

// Match returns the function API Gateway would invoke for method and the
// escaped request path under mount, as the local runner needs it.
func Match(mount, method, escapedPath string) (Function, bool) {
	if mount != "" {
		if !strings.HasPrefix(escapedPath, mount+"/") {
			return Function{}, false
		}
		escapedPath = escapedPath[len(mount):]
	}
	for _, f := range Functions {
		for _, e := range f.Endpoints {
			if e.Method == method && pathMatches(e.Path, escapedPath) {
				return f, true
			}
		}
	}
	return Function{}, false
}

func pathMatches(pattern, path string) bool {
	// Segment by segment without splitting (no allocation: every request
	// is matched against every endpoint).
	for {
		p, pRest, pMore := strings.Cut(pattern, "/")
		x, xRest, xMore := strings.Cut(path, "/")
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if x == "" {
				return false
			}
		} else if p != x {
			return false
		}
		if pMore != xMore {
			return false
		}
		if !pMore {
			return true
		}
		pattern, path = pRest, xRest
	}
}
