package memdb

import "fmt"

// ClientGrantsAfter returns at most limit client grants whose id sorts
// after after ("" for the first), ordered by id: one page of a listing.
func (r *Reader) ClientGrantsAfter(after string, limit int) ([]*ClientGrant, error) {
	it, err := r.txn.LowerBound(TableClientGrants, IndexID, after)
	if err != nil {
		return nil, fmt.Errorf("list %s from %q: %w", TableClientGrants, after, err)
	}
	var out []*ClientGrant
	for raw := it.Next(); raw != nil && len(out) < limit; raw = it.Next() {
		if g := raw.(*ClientGrant); g.ID != after {
			out = append(out, g.Clone())
		}
	}
	return out, nil
}
