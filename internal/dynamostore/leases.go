package dynamostore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skyfold/syncular-lambda/internal/core/store"
)

// Auth lease items (§7.3), one per (partition, clientId): pk P#<p>#LS,
// sk L<clientId> (keys.go). A refresh is one conditional UpdateItem; a
// fresh id (first issuance, another actor, a revoked lease) is one
// conditional PutItem on top, conditioned on the id the first call saw,
// so a concurrent revocation or issuance is never overwritten.
const (
	lsID      = "li" // S: lease id
	lsActor   = "ac" // S
	lsScopes  = "sc" // S: allowed scopes, JSON object of string lists
	lsIssued  = "ia" // N: issuedAtMs
	lsExpires = "ea" // N: expiresAtMs
	lsRevoked = "rv" // BOOL
)

// Lease items carry no DynamoDB TTL: like client records they stay as
// long as the partition (one small item per client) and are replaced by
// the client's next fresh id, so a server clock behind the wall clock
// (tests, a host's virtual clock) never sees a valid lease vanish. Their
// pk does not end in "#L", so the fanout's stream filter (template.yaml)
// and ParseCommitKey pass over every lease write.

// maxLeaseAttempts bounds the slide-or-mint loop against concurrent
// issuances of one clientId.
const maxLeaseAttempts = 4

var _ store.LeaseStore = (*Store)(nil)

// checkLeaseKey: a lease key is a client record's with another one-letter
// sort key prefix, so the same bounds hold.
func checkLeaseKey(p, clientID string) error { return checkClientKey(p, clientID) }

func leaseItem(partition, clientID string, l *store.Lease, scopes string) map[string]types.AttributeValue {
	item := Key(leasePK(partition), leaseSK(clientID))
	item[lsID], item[lsActor], item[lsScopes] = S(l.ID), S(l.ActorID), S(scopes)
	item[lsIssued], item[lsExpires], item[lsRevoked] = N(l.IssuedAtMs), N(l.ExpiresAtMs), BOOL(l.Revoked)
	return item
}

func parseLease(item map[string]types.AttributeValue) (store.Lease, error) {
	id, ok0 := getS(item, lsID)
	actor, ok1 := getS(item, lsActor)
	scopes, ok2 := getS(item, lsScopes)
	issued, ok3 := getN(item, lsIssued)
	expires, ok4 := getN(item, lsExpires)
	rv, ok5 := item[lsRevoked].(*types.AttributeValueMemberBOOL)
	if !ok0 || id == "" || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return store.Lease{}, fmt.Errorf("dynamostore: auth lease item is malformed: %w", errCorrupt)
	}
	l := store.Lease{ID: id, ActorID: actor, IssuedAtMs: issued, ExpiresAtMs: expires, Revoked: rv.Value}
	if err := json.Unmarshal([]byte(scopes), &l.AllowedScopes); err != nil || l.AllowedScopes == nil {
		return store.Lease{}, fmt.Errorf("dynamostore: auth lease scopes are malformed: %w", errCorrupt)
	}
	return l, nil
}

// Lease implements store.LeaseStore (one consistent GetItem).
func (s *Store) Lease(ctx context.Context, partition, clientID string) (store.Lease, bool, error) {
	if err := checkLeaseKey(partition, clientID); err != nil {
		return store.Lease{}, false, err
	}
	item, err := s.getItem(ctx, "read auth lease", leasePK(partition), leaseSK(clientID), nil)
	if err != nil || item == nil {
		return store.Lease{}, false, err
	}
	l, err := parseLease(item)
	return l, err == nil, err
}

// IssueLease implements store.LeaseStore: slide the stored lease when it
// is the actor's and not revoked (the condition makes the check and the
// write one atomic step); otherwise replace the record the failed
// condition saw with l under its fresh id.
func (s *Store) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	if err := checkLeaseKey(partition, clientID); err != nil {
		return store.Lease{}, err
	}
	if l.ID == "" {
		return store.Lease{}, fmt.Errorf("dynamostore: issue auth lease: empty fresh id")
	}
	raw, err := json.Marshal(nonNil(l.AllowedScopes))
	if err != nil {
		return store.Lease{}, fmt.Errorf("dynamostore: encode lease scopes: %w", err)
	}
	scopes := string(raw)
	l.Revoked = false
	// readBack: the last put found a record the failed slide did not
	// return (a concurrent mint, or a backend that returns no item with
	// a failed condition), so read it rather than assume there is none.
	readBack := false
	for range maxLeaseAttempts {
		attrs, err := s.updateItem(ctx, "slide auth lease", &dynamodb.UpdateItemInput{
			Key:                 Key(leasePK(partition), leaseSK(clientID)),
			UpdateExpression:    aws.String("SET sc = :sc, ia = :ia, ea = :ea"),
			ConditionExpression: aws.String("ac = :ac AND rv = :f"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sc": S(scopes), ":ia": N(l.IssuedAtMs), ":ea": N(l.ExpiresAtMs),
				":ac": S(l.ActorID), ":f": BOOL(false),
			},
			ReturnValues: types.ReturnValueAllNew,
		})
		if err == nil {
			return parseLease(attrs)
		}
		if !isConditionFailed(err) {
			return store.Lease{}, err
		}
		old := conditionItem(err)
		if old == nil && readBack {
			if old, err = s.getItem(ctx, "read auth lease", leasePK(partition), leaseSK(clientID), nil); err != nil {
				return store.Lease{}, err
			}
		}
		cond, vals := "attribute_not_exists(pk)", map[string]types.AttributeValue(nil)
		if old != nil {
			// An id's actor never changes and its revocation is final, so
			// "still that id" means "still not slidable".
			oldID, _ := getS(old, lsID)
			cond, vals = "li = :old", map[string]types.AttributeValue{":old": S(oldID)}
		}
		err = s.putItem(ctx, "issue auth lease", leaseItem(partition, clientID, &l, scopes), cond, vals)
		if err == nil {
			return l, nil
		}
		if !isConditionFailed(err) {
			return store.Lease{}, err
		}
		// The record changed (or existed) meanwhile: decide again.
		readBack = old == nil
	}
	return store.Lease{}, fmt.Errorf("dynamostore: issue auth lease: %d concurrent replacements in a row", maxLeaseAttempts)
}

// RevokeLease implements store.LeaseStore: one UpdateItem conditioned on
// the stored id.
func (s *Store) RevokeLease(ctx context.Context, partition, clientID, leaseID string) (bool, error) {
	if err := checkLeaseKey(partition, clientID); err != nil {
		return false, err
	}
	_, err := s.updateItem(ctx, "revoke auth lease", &dynamodb.UpdateItemInput{
		Key:                       Key(leasePK(partition), leaseSK(clientID)),
		UpdateExpression:          aws.String("SET rv = :t"),
		ConditionExpression:       aws.String("li = :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": BOOL(true), ":id": S(leaseID)},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

func nonNil(m map[string][]string) map[string][]string {
	if m == nil {
		return map[string][]string{}
	}
	return m
}
