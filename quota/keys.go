package quota

import "strconv"

// keys builds the engine's Redis keys. Every key of a family carries the
// family id as its Redis Cluster hash tag, family:{<fid>}:…, so all keys one
// script touches live in one slot. See doc/redis-keys.md.
type keys struct{ prefix string }

func (k keys) family(fid int64) string {
	return k.prefix + "family:{" + strconv.FormatInt(fid, 10) + "}:"
}

func (k keys) member(fid, cid int64) string {
	return k.family(fid) + "customer:" + strconv.FormatInt(cid, 10) + ":"
}

func (k keys) meta(fid int64) string               { return k.family(fid) + "meta" }
func (k keys) members(fid int64) string            { return k.family(fid) + "members" }
func (k keys) pool(fid int64, month string) string { return k.family(fid) + "pool:" + month }
func (k keys) alerts(fid int64, month string) string {
	return k.family(fid) + "alerts:" + month
}
func (k keys) event(fid int64, id string) string { return k.family(fid) + "evt:" + id }
func (k keys) constraints(fid, cid int64) string { return k.member(fid, cid) + "constraints" }
func (k keys) version(fid, cid int64) string     { return k.member(fid, cid) + "cver" }
func (k keys) daily(fid, cid int64, day string) string {
	return k.member(fid, cid) + "usage:d:" + day
}
func (k keys) monthly(fid, cid int64, month string) string {
	return k.member(fid, cid) + "usage:m:" + month
}
