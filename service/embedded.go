package service

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/service/judge"
)

// embeddedPoll is the processor's poll bound on the embedded Redis.
func (s *System) embeddedPoll() []judge.ProcessorOpt {
	if s.redisSrv == nil {
		return nil
	}
	return []judge.ProcessorOpt{judge.WithMaxPollRecords(embeddedMaxPoll)}
}

// embeddedRedisTimeout bounds a call to the embedded Redis, in process
// (see StartSystem); embeddedMaxPoll the events the processor judges per
// poll against it: miniredis runs the quota script ≈ 2k/s, so a poll's
// pipelines stay seconds long on a loaded machine.
const (
	embeddedRedisTimeout = time.Minute
	embeddedMaxPoll      = 500
)

// embeddedRedis is the client of the embedded Redis at addr. In process,
// a Redis that answers late is only slow: no network can have failed.
// go-redis's 3 s read timeout turned a slow miniredis (a loaded machine,
// -race) into a batch retried whole for ever, every attempt timing out
// before its last script ran (TestSystemEndToEnd at a load average of 10
// on 2 cores).
func embeddedRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: embeddedRedisTimeout, WriteTimeout: embeddedRedisTimeout})
}
