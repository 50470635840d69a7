package main

// maxUsage is the longest a flag's usage string may be, in characters:
// edihub help prints it on one line. What does not fit goes into
// settingDetails.
const maxUsage = 120

// settingDetails holds, per setting (flag name without the dash), what its
// one-line usage leaves out: the generated docs/settings.md prints it
// below the tables, and the usage stays short enough for edihub help.
// A flag of the same name means the same thing in every command.
var settingDetails = map[string]string{
	"api-token": "Whoever holds it is an admin. Create users and their own tokens instead " +
		"(`edihub users add`, `edihub users token`) and unset it; see [users.md](users.md).",
	"as2-read-timeout": "Counted from the end of the request's header. Nothing of a slower request is stored.",
	"as2-restart": "AS2 restart (draft-harding-as2-restart): a request over `-spool-from-bytes` that asks for it " +
		"(`EDIINT-Features: AS2-Restart` and an `ETag`) has its body kept in the database as it arrives, so that " +
		"the partner can ask any replica how much arrived (`HEAD`) and send the rest. A partner's profile may " +
		"turn it off (`as2_restart: false`). See [receiving.md](receiving.md#interrupted-transfers-as2-restart).",
	"as2-restart-expiry": "Then the leader's purger deletes it and a resume gets HTTP 412: the partner sends the message again.",
	"as2-restart-max-bytes": "Transfers are counted by their declared lengths; a transfer over the limit is received " +
		"without restart.",
	"as2-restart-partner-max-bytes": "Transfers are counted by their declared lengths; a transfer over the limit is " +
		"received without restart.",
	"dispatch-lease": "A crashed replica's items are sent again after it. Claims are extended while an item is being " +
		"sent, so a partner timeout may be longer. At least 1s.",
	"folders-dir": "Every `folder` destination and source of the connectors document names a path relative to it, " +
		"opened through an `os.Root`, so that no path leads out of it; on Kubernetes, a volume (a PersistentVolumeClaim " +
		"or NFS) mounted at the same path on every replica. See [connectors-config.md](connectors-config.md).",
	"gc-heap-floor-bytes": "Above it the heap grows to twice what is live, as with `GOGC=100`: fewer collections under " +
		"a stream of small messages, for this much memory. The Go memory limit still bounds the heap; a `GOGC` set " +
		"in the environment wins.",
	"max-concurrent-per-partner": "Over it, HTTP 503 with `Retry-After`, before the body is read.",
	"max-decompressed-bytes":     "Above it the message's MDN reports `decompression-failed`.",
	"max-in-flight-bytes": "Bodies and decompression count. Over it, HTTP 503 with `Retry-After`, so partners resend. " +
		"0 derives it from the Go memory limit: half of it, at least `-max-body-bytes` plus the decompression " +
		"limit; without a memory limit, 4 times that. See [receiving.md](receiving.md#limits).",
	"max-mdn-bytes": "An MDN is a few KiB. The leader's MDN poller keeps a larger one already stored as an orphan " +
		"without reading it.",
	"max-password-checks": "Each check takes 19 MiB for tens of milliseconds; sign-ins over the limit get HTTP 429 " +
		"with `Retry-After`. See [users.md](users.md).",
	"mdn-batch-size": "Keep transactions short: the next leader's term waits for them.",
	"mdn-poll-interval": "A stored MDN wakes the poller at once through `LISTEN`/`NOTIFY`; the interval bounds the " +
		"wait when no notification arrives.",
	"oidc-issuer": "Keycloak, Entra ID, Okta, ...: exactly as its discovery document states it. See [oidc.md](oidc.md).",
	"oidc-roles":  "For example `edi-admins=admin,edi-ops=operator,edi-viewers=viewer`.",
	"ops-pprof": "CPU, heap and goroutine profiles, for performance work. Off in production unless the ops " +
		"listener is private.",
	"ops-dns": "For example the headless Service `edihub-ops.edihub.svc.cluster.local:9090`.",
	"retry-window": "It covers outbound messages, webhook deliveries and async MDNs owed to a partner. A message " +
		"fails only when both `max_attempts` and this window are used up; a partner's `retry_window` overrides it.",
	"secrets-dir": "The Secret's keys are files: a stored partner names its HTTP password (`auth.password_file`) and " +
		"TLS client certificate and key (`tls.cert_file`, `tls.key_file`) by a file name in it, never by a path. " +
		"See [partners.md](partners.md).",
	"shutdown-delay": "The delay starts after the lease is released, so load balancers stop sending traffic before " +
		"the listeners close.",
	"smtp-url": "`smtp://user@host:587` (STARTTLS required), `smtps://user@host:465` (implicit TLS), or " +
		"`smtp://host:1025?tls=none` for a local catcher. See [report.md](report.md).",
	"spool-dir": "AS2 bodies, API documents and console uploads larger than `-spool-from-bytes` (and chunked ones) " +
		"are spooled there, and outbound messages that large are built there, in a subdirectory per process " +
		"removed at exit (and at the next start after a crash). On Kubernetes, an emptyDir volume.",
	"spool-from-bytes": "AS2 bodies, API documents and console uploads above it are spooled and unwrapped (stored) as " +
		"a stream in constant memory; outbound messages whose payload is above it are built as a stream into the " +
		"spool and sent from it. See [receiving.md](receiving.md#limits) and " +
		"[sending.md](sending.md#large-messages-any-size-in-constant-memory).",
	"spool-max-bytes": "It bounds all large messages in flight on this replica: a received one takes its body and its " +
		"payload, an API or console upload its document, a send its built body. Over it, partners and API clients " +
		"get HTTP 503 with `Retry-After` so they resend, and a send is retried later.",
	"webhook-secret-file": "Each delivery carries `X-Edihub-Timestamp` and `X-Edihub-Signature: sha256=` and the hex " +
		"HMAC-SHA256 of the timestamp, the event id and the body joined by dots; [sending.md](sending.md) says how " +
		"to verify it.",
	"webhook-url":         "The events: received, sent, delivered, failed, overdue; each is delivered at least once.",
	"worker-stop-timeout": "Also the longest a fenced transaction may sit idle before the database ends it.",
	"worker-stuck-after":  "`/healthz` then fails, so the replica is restarted.",
}
