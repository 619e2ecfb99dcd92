// Package config is a jiarun job's configuration, the successor of JIAJIA's
// .jiaconf: which transport to use, message-passing and DSM tuning, logging
// and launch behaviour.
//
// # Where settings come from
//
// From the lowest precedence to the highest:
//
//  1. the defaults ([Default]);
//  2. a TOML file: jia.toml in the working directory if it exists, or the
//     file named by jiarun --config FILE, which must exist;
//  3. environment variables JIA_<SECTION>_<KEY>;
//  4. jiarun's flags (such as --transport).
//
// [Resolve] does 1–3; the command applies its flags with [Config.Set] or by
// assigning fields, and checks the result with [Config.Validate]. The
// launcher then hands the resolved configuration to every rank as TOML text
// ([Config.Encode]) in one variable of the launch contract,
// JIA_CONFIG_DATA, which the rank reads back with [Decode]; so all ranks of a
// job run with the same settings whatever their hosts' environments hold.
//
// # The file
//
// Every key is optional; a key left out keeps its default. This file sets
// every key to its default:
//
//	# jia.toml — jiarun job configuration
//
//	[transport]
//	kind = "auto"            # "auto" | "shm" | "tcp" | "verbs"
//	tcp_send_buffer = "256KiB"  # each tcp connection's; 0 = the kernel's
//
//	[comm]
//	eager_limit = 0          # bytes; 0 = each provider's default
//	shm_eager_limit = 0      # per-provider overrides; 0 = eager_limit
//	tcp_eager_limit = 0
//	verbs_eager_limit = 0
//	rendezvous_read = true   # zero-copy one-sided READ for rendezvous
//	pack_vectors = false     # pack strided sends instead of gathering them
//	split_min = "128KiB"     # both ends copy a rendezvous from this size (one host, a processor per rank; 0: off)
//	ud_retransmit_timeout = "200ms"
//
//	[dsm]
//	page_cache_pages = 0     # 0 = no bound
//	max_alloc = "4GiB"
//	home_migration = false
//	prefetch_pages = 4       # 0 = no prefetching
//	prefetch_lookahead = 1
//	write_detection = "wp"   # "wp" | "twin"
//	stats = false
//	host_share = true        # ranks of a one-host job share one copy
//
//	[log]
//	level = "warn"           # "debug" | "info" | "warn" | "error"
//	format = "text"          # "text" | "json"
//
//	[launch]
//	grace_period = "1s"      # between SIGTERM and SIGKILL
//	timeout = "0s"           # 0 = no limit
//
// The fields of [Config] document each key. Sizes ([ByteSize]) are an
// integer number of bytes or a string with a binary unit: "64KiB", "4MiB",
// "1G", "1.5GiB". Durations are a string such as "200ms", "1.5s", "2m30s",
// or a number of seconds. Named values (kind, write_detection, level,
// format) are not case-sensitive.
//
// Mistakes are errors, never silently ignored, and all of a file's mistakes
// are reported at once, each with its line:
//
//	jia.toml:3: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)
//	jia.toml:7: unknown key "dsm.prefech_pages" (did you mean "dsm.prefetch_pages"?)
//	jia.toml:8: dsm.stats: expected true or false, found string "yes"
//	jia.toml:12: expected value but found "tru" instead
//
// # Environment variables
//
// Each key has a variable named after its section and key in upper case:
//
//	JIA_TRANSPORT_KIND (alias JIA_TRANSPORT), JIA_TRANSPORT_TCP_SEND_BUFFER
//	JIA_COMM_EAGER_LIMIT, JIA_COMM_SHM_EAGER_LIMIT, JIA_COMM_TCP_EAGER_LIMIT,
//	JIA_COMM_VERBS_EAGER_LIMIT, JIA_COMM_RENDEZVOUS_READ, JIA_COMM_PACK_VECTORS,
//	JIA_COMM_SPLIT_MIN, JIA_COMM_UD_RETRANSMIT_TIMEOUT
//	JIA_DSM_PAGE_CACHE_PAGES, JIA_DSM_MAX_ALLOC, JIA_DSM_HOME_MIGRATION,
//	JIA_DSM_PREFETCH_PAGES, JIA_DSM_PREFETCH_LOOKAHEAD,
//	JIA_DSM_WRITE_DETECTION, JIA_DSM_STATS, JIA_DSM_HOST_SHARE
//	JIA_LOG_LEVEL, JIA_LOG_FORMAT
//	JIA_LAUNCH_GRACE_PERIOD, JIA_LAUNCH_TIMEOUT
//
// The names are derived from the struct tags, so a new field has its
// variable without further work; [EnvNames] lists them. Values are written
// without quotes (JIA_COMM_EAGER_LIMIT=64KiB, JIA_DSM_STATS=true,
// JIA_LAUNCH_TIMEOUT=10m); booleans also accept 1/0, yes/no, on/off. An
// empty variable counts as unset. JIA_RANK, JIA_SIZE, JIA_LOCAL_RANK,
// JIA_LOCAL_SIZE, JIA_JOB, JIA_RENDEZVOUS, JIA_SECRET, JIA_HOST, JIA_ADDR and
// JIA_CONFIG_DATA belong to the launch contract, not to the configuration;
// [UnknownEnv] reports any other JIA_ variable, most likely a typo, and
// [SuggestEnv] the name it probably meant.
package config
