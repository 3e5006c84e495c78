package quota

import (
	"strconv"
	"strings"
)

// keys builds the engine's Redis keys. Every key of a family carries the
// family id as its Redis Cluster hash tag, family:{<fid>}…, so all keys one
// script touches live in one slot. See doc/redis-keys.md.
type keys struct{ prefix string }

// family is the family hash: plan, thr and m:<cid> for each member.
func (k keys) family(fid int64) string {
	return k.prefix + "family:{" + strconv.FormatInt(fid, 10) + "}"
}

func (k keys) member(fid, cid int64) string {
	return k.family(fid) + ":customer:" + strconv.FormatInt(cid, 10) + ":"
}

// pool is the month's pool hash: used, topup, a:<pct> for fired alerts,
// n:<pct> counting how often each fired this month, and per member u:<cid>
// (the month's usage) and d:<cid> ("DD:bytes", the member's latest day).
func (k keys) pool(fid int64, month string) string { return k.family(fid) + ":pool:" + month }

// events is a dedupe bucket: eventId -> stored result, for the events that
// arrived in bucket b (b = arrival Unix time / dedupe window), and
// bucketMarked once its TTL is set.
func (k keys) events(fid int64, b int64) string {
	return k.family(fid) + ":evt:" + strconv.FormatInt(b, 10)
}

// grants is the family's open grants: <cid>|<grantId> -> the reservation
// "<bytes>|<YYYYMMDD>|<unix s>" (see lua/grant.lua).
func (k keys) grants(fid int64) string { return k.family(fid) + ":grants" }

// state is a state marker; tag picks its Redis Cluster slot (one marker per
// master). See lua/state.lua.
func (k keys) state(tag string) string { return k.prefix + "dpcs:state:{" + tag + "}" }

// budget is the member's day hash of daily budget counters (see
// policy/budget.go): a:<appId> and c:<category>, the day's allowed bytes of
// each app and category counted while it has a budget; written only then,
// and living to the day's end and the dedupe window's late events after.
func (k keys) budget(fid, cid int64, day string) string { return k.member(fid, cid) + "budget:" + day }

func (k keys) constraints(fid, cid int64) string { return k.member(fid, cid) + "constraints" }

// legacyVersion is where an earlier engine kept the member's policy version
// (now the family hash's v:<cid>, versionField): read while v:<cid> is
// absent, deleted when the version is written.
func (k keys) legacyVersion(fid, cid int64) string { return k.member(fid, cid) + "ver" }

// usage is the member's month hash: d:<DD> for each day of the month but
// the latest (which is d:<cid> in the pool hash). An earlier engine kept
// every day here and m, the month total; apply.lua still reads those.
func (k keys) usage(fid, cid int64, month string) string {
	return k.member(fid, cid) + "usage:" + month
}

// Hash fields.
const (
	fieldPlan       = "plan"
	fieldThresholds = "thr"
	fieldUsed       = "used"
	fieldTopUp      = "topup"
	fieldMonth      = "m"
	fieldGeneration = "g"
	prefixMember    = "m:"
	// prefixVersion starts the family hash's v:<cid>, the member's policy
	// version (it outlives the membership: stale updates stay ignored).
	prefixVersion = "v:"
	prefixAlert   = "a:"
	prefixArms    = "n:"
	prefixDay     = "d:"
	// prefixMonthUsage is the pool hash's u:<cid>, the member's month.
	prefixMonthUsage = "u:"
	// fieldReserved is the pool hash's r, what the family's grants reserve
	// of the month; prefixReserved starts r:<cid> (the member's month) and
	// r:<cid>:<DD> (its day DD).
	fieldReserved  = "r"
	prefixReserved = "r:"
	bucketMarked   = "" // no event id is empty
)

func memberField(cid int64) string  { return prefixMember + strconv.FormatInt(cid, 10) }
func versionField(cid int64) string { return prefixVersion + strconv.FormatInt(cid, 10) }

// dayField is the usage hash field of a YYYYMMDD day.
func dayField(day string) string { return prefixDay + day[6:8] }

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (the part between the first '{' and the next '}', when not empty) or
// of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
