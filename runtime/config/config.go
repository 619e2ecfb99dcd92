package config

import (
	"log/slog"
	"time"
)

// Config is a job's configuration. The zero value is not useful: start from
// [Default], [Load], [Decode] or [Resolve].
//
// Every field has a TOML key (its toml tag, within the section's table) and an
// environment variable JIA_<SECTION>_<KEY> in upper case, derived from the tags;
// see the package documentation for the list.
type Config struct {
	// Transport chooses the provider under the queues.
	Transport TransportConfig `toml:"transport"`
	// Comm tunes message passing.
	Comm CommConfig `toml:"comm"`
	// DSM tunes the distributed shared memory.
	DSM DSMConfig `toml:"dsm"`
	// Log chooses what the runtime and the launcher log.
	Log LogConfig `toml:"log"`
	// Launch tunes how jiarun starts and stops the ranks.
	Launch LaunchConfig `toml:"launch"`
}

// TransportConfig is the [transport] section.
type TransportConfig struct {
	// Kind is the provider used between ranks. "auto" (the default) picks,
	// for each peer, shm on the same host, verbs where an RDMA device is
	// present and tcp otherwise; any other value forces that provider for
	// every peer. Variables: JIA_TRANSPORT_KIND, or its alias JIA_TRANSPORT.
	Kind TransportKind `toml:"kind" env:"JIA_TRANSPORT"`
	// TCPSendBuffer is the send buffer (SO_SNDBUF, which the kernel
	// doubles, up to net.core.wmem_max) of every connection the tcp
	// provider opens between ranks: small enough for the bytes in transit
	// to stay in the processors' caches, where the kernel's own sizing
	// lets megabytes queue. A path whose bandwidth-delay product exceeds
	// twice the buffer (a long path, or a very fast one) is held below its
	// speed: raise it there; 0 leaves the buffer to the kernel. At most
	// 1GiB. Default 256KiB.
	TCPSendBuffer ByteSize `toml:"tcp_send_buffer" max:"1GiB"`
}

// CommConfig is the [comm] section.
type CommConfig struct {
	// EagerLimit is the largest message, in bytes, sent eagerly (copied
	// into the receiver's bounce buffers); larger messages use the
	// rendezvous protocol. 0 (the default) lets each provider use its own
	// default.
	EagerLimit ByteSize `toml:"eager_limit"`
	// SHMEagerLimit overrides EagerLimit for the shm provider; 0 (the
	// default) means EagerLimit.
	SHMEagerLimit ByteSize `toml:"shm_eager_limit"`
	// TCPEagerLimit overrides EagerLimit for the tcp provider; 0 (the
	// default) means EagerLimit.
	TCPEagerLimit ByteSize `toml:"tcp_eager_limit"`
	// VerbsEagerLimit overrides EagerLimit for the verbs provider; 0 (the
	// default) means EagerLimit.
	VerbsEagerLimit ByteSize `toml:"verbs_eager_limit"`
	// RendezvousRead makes the rendezvous protocol move the payload with a
	// one-sided RDMA READ issued by the receiver straight from the
	// sender's buffer (zero copy) where the provider supports it, instead
	// of sender-driven writes. Default true. Without it the sender, once
	// cleared to send, copies the message through the transport as data
	// messages of the eager size, as fast as the receiver takes them: a
	// copy more at each end (two ranks on one host streaming 512 KiB
	// messages: about 4 GB/s, against 7–11 with READ).
	RendezvousRead bool `toml:"rendezvous_read"`
	// PackVectors makes strided (vector) sends pack their blocks into a
	// contiguous buffer before sending, instead of gathering them straight
	// from the user's memory with scatter/gather lists. Default false.
	PackVectors bool `toml:"pack_vectors"`
	// SplitMin is the message size from which a rendezvous between
	// contiguous buffers is copied by both ends at once: the receiver reads
	// the first half while the sender writes the second, so that two
	// processors copy instead of one. It applies only where it pays: every
	// rank of the job on one host (shared memory), no more ranks there
	// than processors, and not while the receiver has a large message of
	// its own on the way to the sender (an exchange, where both already
	// copy). 0 turns it off. Default 128KiB.
	SplitMin ByteSize `toml:"split_min"`
	// UDRetransmitTimeout is how long a control datagram sent on the
	// unreliable datagram (UD) queue may stay unacknowledged before it is
	// sent again. Must be positive. Default 200ms.
	UDRetransmitTimeout time.Duration `toml:"ud_retransmit_timeout" check:"positive"`
}

// EagerLimitFor returns the eager limit for the provider kind: the
// provider's override if set, else EagerLimit. A result of 0 means the
// provider's own default.
func (c CommConfig) EagerLimitFor(kind TransportKind) ByteSize {
	var override ByteSize
	switch kind {
	case TransportSHM:
		override = c.SHMEagerLimit
	case TransportTCP:
		override = c.TCPEagerLimit
	case TransportVerbs:
		override = c.VerbsEagerLimit
	}
	if override != 0 {
		return override
	}
	return c.EagerLimit
}

// DSMConfig is the [dsm] section.
type DSMConfig struct {
	// PageCachePages bounds how many pages homed elsewhere a rank keeps
	// mapped at once; when the cache is full the least recently fetched
	// page is dropped (its diff flushed first). 0 (the default) means no
	// bound other than the size of the shared regions.
	PageCachePages int `toml:"page_cache_pages"`
	// MaxAlloc is the most shared memory, in bytes, the job may allocate
	// in total; it is also the size of the address range every rank
	// reserves at start. Must be positive. Default 4GiB.
	MaxAlloc ByteSize `toml:"max_alloc" check:"positive"`
	// HomeMigration lets a page's home move to the rank that writes it
	// most (JIAJIA's home migration), at barriers. Default false.
	HomeMigration bool `toml:"home_migration"`
	// PrefetchPages is how many pages following a faulting page are
	// fetched along with it when the faults look sequential. 0 disables
	// prefetching. Default 4.
	PrefetchPages int `toml:"prefetch_pages"`
	// PrefetchLookahead is how many prefetch batches may be requested
	// ahead of the access stream at once. Ignored when PrefetchPages is 0.
	// Default 1.
	PrefetchLookahead int `toml:"prefetch_lookahead"`
	// WriteDetection is how writes to pages homed elsewhere are detected:
	// "wp" (the default) write-protects fetched pages and twins a page at
	// its first write fault; "twin" twins every page when it is fetched
	// and maps it writable, trading memory and copying for fewer faults.
	WriteDetection WriteDetection `toml:"write_detection"`
	// Stats makes every rank count DSM events (faults, fetches, diffs,
	// write notices, lock and barrier waits) and print them at Finalize.
	// Default false.
	Stats bool `toml:"stats"`
	// HostShare makes the ranks of a job that runs on one host share the
	// memory of every region: one copy per host, mapped by every rank,
	// read and written with no page faults, fetches or diffs. Locks and
	// barriers still order the ranks. Home placement is still checked and
	// reported, but home migration, prefetching, the page cache bound and
	// write detection have nothing to do then. Jobs on several hosts
	// ignore it. Default true.
	HostShare bool `toml:"host_share"`
}

// LogConfig is the [log] section.
type LogConfig struct {
	// Level is the least severe level logged: "debug", "info", "warn" (the
	// default: quiet unless something is wrong) or "error".
	Level LogLevel `toml:"level"`
	// Format is the form of log records on standard error: "text" (the
	// default) or "json".
	Format LogFormat `toml:"format"`
}

// LaunchConfig is the [launch] section.
type LaunchConfig struct {
	// GracePeriod is how long jiarun waits, after sending SIGTERM to the
	// ranks (at an interrupt, a failed rank or a timeout), before it sends
	// SIGKILL. Default 1s.
	GracePeriod time.Duration `toml:"grace_period"`
	// Timeout stops the job, as an interrupt would, when it has run this
	// long. 0 (the default) means no limit.
	Timeout time.Duration `toml:"timeout"`
}

// Default returns the default configuration, the base that files,
// environment variables and flags overlay.
func Default() Config {
	return Config{
		Transport: TransportConfig{Kind: TransportAuto, TCPSendBuffer: 256 * KiB},
		Comm: CommConfig{
			RendezvousRead:      true,
			SplitMin:            128 * KiB,
			UDRetransmitTimeout: 200 * time.Millisecond,
		},
		DSM: DSMConfig{
			MaxAlloc:          4 * GiB,
			PrefetchPages:     4,
			PrefetchLookahead: 1,
			HostShare:         true,
			WriteDetection:    WriteDetectionWP,
		},
		Log:    LogConfig{Level: LogWarn, Format: LogText},
		Launch: LaunchConfig{GracePeriod: time.Second},
	}
}

// TransportKind names a provider, or "auto". See [TransportConfig.Kind].
type TransportKind string

// The transport kinds.
const (
	TransportAuto  TransportKind = "auto"  // choose per peer
	TransportSHM   TransportKind = "shm"   // shared memory, ranks on one host only
	TransportTCP   TransportKind = "tcp"   // soft RDMA over TCP and UDP
	TransportVerbs TransportKind = "verbs" // libibverbs (InfiniBand, RoCE)
)

func (TransportKind) values() []string { return []string{"auto", "shm", "tcp", "verbs"} }

// WriteDetection names a way of detecting DSM writes. See
// [DSMConfig.WriteDetection].
type WriteDetection string

// The write detection methods.
const (
	WriteDetectionWP   WriteDetection = "wp"   // write-protect, twin at first write
	WriteDetectionTwin WriteDetection = "twin" // twin at fetch
)

func (WriteDetection) values() []string { return []string{"wp", "twin"} }

// LogLevel is a log severity threshold. See [LogConfig.Level].
type LogLevel string

// The log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

func (LogLevel) values() []string { return []string{"debug", "info", "warn", "error"} }

// SlogLevel returns the log/slog level for l; an unknown level is
// slog.LevelWarn.
func (l LogLevel) SlogLevel() slog.Level {
	switch l {
	case LogDebug:
		return slog.LevelDebug
	case LogInfo:
		return slog.LevelInfo
	case LogError:
		return slog.LevelError
	}
	return slog.LevelWarn
}

// LogFormat is the form of log records. See [LogConfig.Format].
type LogFormat string

// The log formats.
const (
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

func (LogFormat) values() []string { return []string{"text", "json"} }
