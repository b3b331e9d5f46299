//! The command line, as clap derive types. Every command documents itself with examples.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};
use engram_server::Peer;

use crate::txjson::TX_FORMAT_HELP;

const EXIT_CODES: &str = "EXIT CODES
  0  success
  1  any error: bad input, a refused request (the gRPC status is printed), unreachable nodes,
     a failed demo check
  2  `audit verify` found a tampered or inconsistent audit chain (or a verified read's proof
     failed)
  3  `audit verify FILE|--data-dir` could not read its input at all: no such file, not an
     export, an export format version newer than this build, a store in use";

#[derive(Parser, Debug)]
#[command(
    name = "engram",
    version,
    about = "Engram: a replicated, verifiable memory store for multi-agent systems",
    long_about = "Engram: a replicated, verifiable memory store for multi-agent systems.\n\n\
        Run nodes with `engram serve`, form a cluster with `engram cluster init`, write facts with \
        `engram transact`, read them with `get`, `history` and `find`, and check the signed audit \
        chain with `engram audit verify`. `engram demo` does all of it on a local 3-node cluster.",
    after_help = "EXAMPLES\n  engram demo\n  engram --endpoint 127.0.0.1:7001 cluster status\n  \
        echo '{...}' | engram transact -\n  engram get --ns team/a --entity 12 --json",
    after_long_help = EXIT_CODES,
)]
pub struct Cli {
    /// A node to talk to, as HOST:PORT. Repeat the flag (or separate with commas) to give
    /// several; calls fail over between them.
    #[arg(
        long = "endpoint",
        short = 'e',
        global = true,
        env = "ENGRAM_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7001",
        value_name = "HOST:PORT"
    )]
    pub endpoints: Vec<String>,

    /// Print machine-readable JSON on stdout instead of tables and prose.
    #[arg(long, global = true)]
    pub json: bool,

    /// Connect over TLS, trusting servers whose certificates chain to this CA (PEM).
    #[arg(long, global = true, env = "ENGRAM_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// A certificate (PEM) to present: the client's with --tls-ca (mutual TLS), or, for
    /// `serve`, the node's own.
    #[arg(
        long,
        global = true,
        env = "ENGRAM_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "ENGRAM_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// How long to keep retrying a call that fails transiently (no leader, node unreachable),
    /// rotating over the endpoints. Writes are retried only if they carry an idempotency key.
    #[arg(long, global = true, env = "ENGRAM_RETRY_BUDGET_SECS", default_value_t = 15.0, value_name = "SECS",
          value_parser = parse_budget)]
    pub retry_budget_secs: f64,

    /// Sign every request as an agent, with its key file (made by `engram agent keygen` or
    /// `engram agent create`). A cluster in enforced mode refuses unsigned requests.
    #[arg(long, global = true, env = "ENGRAM_AGENT_KEY", value_name = "FILE")]
    pub agent_key: Option<PathBuf>,

    /// Trust checkpoints signed by this node key (64 hex characters, as `engram cluster status`
    /// lists them; repeat or comma-separate for several) for proven reads, instead of verifying
    /// the whole chain first, which needs the `audit` grant. Pin the new key after a rotation.
    #[arg(long, global = true, env = "ENGRAM_TRUST_KEYS", value_name = "HEX", value_delimiter = ',',
          value_parser = parse_node_key)]
    pub trust_key: Vec<engram_audit::PublicKey>,

    #[command(subcommand)]
    pub command: Command,
}

fn parse_admin(s: &str) -> Result<(engram_access::Principal, engram_audit::PublicKey), String> {
    let (name, key) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} must look like NAME=PUBLIC_KEY"))?;
    let name = engram_access::Principal::new(name).map_err(|e| e.to_string())?;
    let raw = hex::decode(key).map_err(|_| format!("public key {key:?} is not hex"))?;
    let bytes: [u8; 32] = raw
        .as_slice()
        .try_into()
        .map_err(|_| format!("public key is {} bytes, expected 32", raw.len()))?;
    Ok((name, engram_audit::PublicKey(bytes)))
}

const AGENT_EXAMPLES: &str = "EXAMPLES
  # before `cluster init --security enforced`: the first administrator's key
  engram agent keygen admin --out admin.key
  # an administrator registers agents (each gets a new key file) and grants them rights
  engram --agent-key admin.key agent create alice --out alice.key
  engram --agent-key admin.key grant alice --action read,write --ns team/a
  # an agent replaces its own key
  engram --agent-key alice.key agent rotate alice --out alice-2.key
  engram --agent-key admin.key agent revoke alice
  # roles: grant to role:NAME once, then assign agents to it
  engram --agent-key admin.key grant role:ops --action read,write --ns infra
  engram --agent-key admin.key agent assign-role bob ops
  engram --agent-key admin.key agent list --json";

#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// Make a new key file (no cluster involved) and print its public key.
    Keygen {
        /// The agent name the key signs as: A-Z a-z 0-9 _ . @ : + -.
        name: String,
        /// Where to write the key file (mode 0600; an existing file is never overwritten).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Make a new key file and register the agent with its public key (needs key-admin).
    Create {
        name: String,
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Register an agent whose public key is already known (needs key-admin).
    Add {
        name: String,
        /// 64 hex characters.
        #[arg(long, value_name = "HEX")]
        public_key: String,
    },
    /// Give an agent a new key (written to --out); the old one is refused from then on. An
    /// agent may rotate its own key; another's needs key-admin.
    Rotate {
        name: String,
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Refuse every key of an agent from now on (needs key-admin).
    Revoke { name: String },
    /// Every registered agent, its key, its roles and whether it is revoked.
    List,
    /// Give an agent every grant of a role (grants to `role:NAME`) while assigned; needs grant
    /// on every namespace.
    AssignRole {
        agent: String,
        /// The role's name, without `role:`.
        role: String,
    },
    /// Take a role from an agent (refused if it would leave no administrator).
    UnassignRole { agent: String, role: String },
}

#[derive(Args, Debug)]
pub struct McpArgs {
    /// The agent the facts are recorded as; with --agent-key it is the key's agent (and every
    /// request is signed by it).
    #[arg(long, env = "ENGRAM_AGENT", value_name = "NAME")]
    pub agent: Option<String>,
    /// Serve MCP's streamable HTTP transport on this address (e.g. 127.0.0.1:8090) instead of
    /// stdio. Whoever reaches it acts as the agent: keep it on loopback or behind your own
    /// authentication.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// With --listen: a host name clients may use besides loopback (the Host header is checked
    /// against DNS rebinding). Repeat for several.
    #[arg(long = "allowed-host", value_name = "HOST", requires = "listen")]
    pub allowed_hosts: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ConsoleArgs {
    /// Serve the page on this address (port 0: any free port). Requests need the token the
    /// printed address carries; keep it on loopback unless the network to it is yours.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7080")]
    pub listen: std::net::SocketAddr,
}

const CONSOLE_EXAMPLES: &str = "EXAMPLES\n  \
    engram -e 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 console\n  \
    engram -e n1:7001 --agent-key operator.key --tls-ca ca.pem console --listen 127.0.0.1:9000\n  \
    engram -e 127.0.0.1:7001 --json console --listen 127.0.0.1:0   (prints {\"url\": ...})\n\n\
    Every endpoint given is shown on the cluster page; the audit log and proofs are read from the\n\
    first. Stop it with Ctrl-C.";

const MCP_EXAMPLES: &str = "EXAMPLES\n  \
    engram -e 127.0.0.1:7001,127.0.0.1:7002 mcp --agent researcher\n  \
    engram -e n1:7001 --agent-key researcher.key mcp\n  \
    engram -e n1:7001 mcp --agent researcher --listen 127.0.0.1:8090\n\n\
    In an MCP host's configuration (e.g. a JSON \"mcpServers\" entry):\n  \
    {\"command\": \"engram\", \"args\": [\"-e\", \"127.0.0.1:7001\", \"mcp\", \"--agent\", \"researcher\"]}";

#[derive(Args, Debug)]
pub struct GrantArgs {
    /// An agent name, or '*' for every authenticated agent.
    pub principal: String,
    /// One or more of: read, read-history, watch, write, retract, promote, schema, branch,
    /// merge, audit, cluster-admin, key-admin, grant.
    #[arg(
        long = "action",
        value_delimiter = ',',
        required = true,
        value_name = "ACTION"
    )]
    pub actions: Vec<String>,
    /// The namespace prefix, by whole segments ("team" covers "team/a", not "teams"); omit
    /// for every namespace (required for audit, cluster-admin and key-admin).
    #[arg(long = "ns", default_value = "", value_name = "PREFIX")]
    pub prefix: String,
    /// Only this attribute (:hr/salary) or attribute prefix (:hr/*), for the data actions; a
    /// read of other attributes returns their datoms with the value redacted.
    #[arg(long, default_value = "", value_name = "ATTRIBUTE")]
    pub attribute: String,
}

fn parse_node_key(s: &str) -> Result<engram_audit::PublicKey, String> {
    let bytes = hex::decode(s.trim()).map_err(|_| format!("{s:?} is not hex"))?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a node key is 32 bytes (64 hex characters), not {}", b.len()))?;
    Ok(engram_audit::PublicKey(key))
}

fn parse_budget(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in 0..=3600")),
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run an Engram node in the foreground (until SIGINT or SIGTERM).
    #[command(after_help = "EXAMPLES\n  \
        # a 3-node cluster on one machine; then run `engram cluster init` once\n  \
        engram serve --id 1 --listen 127.0.0.1:7001 --data-dir /var/lib/engram/1\n  \
        engram serve --id 2 --listen 127.0.0.1:7002 --data-dir /var/lib/engram/2\n  \
        engram serve --id 3 --listen 127.0.0.1:7003 --data-dir /var/lib/engram/3\n\n  \
        # or let the nodes form the cluster themselves\n  \
        ENGRAM_PEERS=1=n1:7001,2=n2:7001,3=n3:7001 engram serve --id 1 --listen 0.0.0.0:7001 \\\n      \
        --advertise n1:7001 --data-dir /data --bootstrap")]
    Serve(Box<ServeArgs>),

    /// Form the cluster, inspect it, change its membership.
    #[command(subcommand)]
    Cluster(ClusterCommand),

    /// Agents and their keys: make a key file, register, rotate, revoke, list.
    #[command(subcommand, after_help = AGENT_EXAMPLES)]
    Agent(AgentCommand),

    /// Allow a principal actions on the namespaces under a prefix (an audited change).
    #[command(
        after_help = "EXAMPLES\n  engram --agent-key admin.key grant alice --action read,write --ns team/a\n  \
        engram --agent-key admin.key grant '*' --action read --ns shared\n  \
        engram --agent-key admin.key grant auditor --action audit"
    )]
    Grant(GrantArgs),

    /// Withdraw a grant (refused if it would leave no active agent holding `grant` on every
    /// namespace).
    #[command(
        after_help = "EXAMPLES\n  engram --agent-key admin.key revoke alice --action write --ns team/a"
    )]
    Revoke(GrantArgs),

    /// Who the cluster takes this client for, its security mode, and the grants that apply.
    #[command(after_help = "EXAMPLES\n  engram --agent-key alice.key whoami --json")]
    Whoami,

    /// Who read what, and when: the access log of each node given with -e (the reads,
    /// watches and exports it served on the namespaces it logs, `serve --access-log PREFIX`).
    /// Each node keeps and signs its own; `--verify` checks every node's whole log.
    #[command(
        after_help = "EXAMPLES\n  engram --agent-key auditor.key -e n1:7001 -e n2:7001 -e n3:7001 access --ns team/a --principal bob\n  \
        engram --agent-key auditor.key -e n1:7001 access --last-secs 3600 --json\n  \
        engram --agent-key auditor.key -e n1:7001 -e n2:7001 access --verify\n  \
        engram --agent-key auditor.key -e n1:7001 -e n2:7001 access --export reads.json\n  \
        engram access --verify-file reads.json\n  \
        engram --agent-key auditor.key access --enable team/finance"
    )]
    Access(AccessArgs),

    /// Retention: keep what is written to a namespace (or one attribute) for a while, then
    /// redact it automatically (`set`, `off`, `list`).
    #[command(subcommand)]
    Retention(RetentionCommand),

    /// Sessions: make a namespace volatile while a session lives; when it ends or lapses, the
    /// leader forgets everything written there (`open`, `renew`, `end`, `list`).
    #[command(subcommand)]
    Session(SessionCommand),

    /// Serve the operator console: a read-only web page over the cluster (status and alarms,
    /// the audit log with proofs checked on this machine, entity timelines, job and access
    /// logs). Prints the address to open, which carries the page's token.
    #[command(after_help = CONSOLE_EXAMPLES)]
    Console(ConsoleArgs),

    /// Serve the memory as Model Context Protocol tools on stdin/stdout, acting as one agent
    /// (remember, recall, get, history, what_changed, list, query, branch, forget, session, verify).
    #[command(after_help = MCP_EXAMPLES)]
    Mcp(McpArgs),

    /// Record a transaction read from a JSON file (or stdin).
    #[command(after_help = TX_FORMAT_EXAMPLES, after_long_help = TX_FORMAT_HELP)]
    Transact(TransactArgs),

    /// Show the current facts of an entity.
    #[command(after_help = "EXAMPLES\n  engram get --ns team/a --entity 12\n  \
        engram get --ns team/a --entity 12 --as-of-tx 40 --json\n  \
        engram get --ns team/a --entity 12 --stale --endpoint 127.0.0.1:7003")]
    Get(GetArgs),

    /// List every assertion and retraction of an entity or an attribute, in transaction order.
    #[command(after_help = "EXAMPLES\n  engram history --ns team/a --entity 12\n  \
        engram history --ns team/a --entity 12 --attribute :task/status\n  \
        engram history --ns team/a --attribute :task/status --limit 50")]
    History(HistoryArgs),

    /// Find the entities whose current value of an attribute is (optionally) a given value.
    #[command(
        after_help = "EXAMPLES\n  engram find --ns team/a --attribute :task/status\n  \
        engram find --ns team/a --attribute :task/status --value '{\"keyword\":\":status/open\"}'"
    )]
    Find(FindArgs),

    /// List the namespaces you may read, in name order.
    #[command(after_help = "EXAMPLES\n  engram namespaces\n  engram namespaces --json --limit 100")]
    Namespaces(NamespacesArgs),

    /// List the entities of a namespace (those with a datom of --attribute, if given), in id
    /// order, retracted or not; `find` lists those holding a value now.
    #[command(after_help = "EXAMPLES\n  engram entities --ns team/a\n  \
        engram entities --ns team/a --attribute :task/status --as-of-tx 40 --json")]
    Entities(EntitiesArgs),

    /// List the current facts that refer to an entity (reverse references), by attribute and
    /// entity.
    #[command(after_help = "EXAMPLES\n  engram referrers --ns team/a --entity 12\n  \
        engram referrers --ns team/a --entity 12 --attribute :task/owner --json")]
    Referrers(ReferrersArgs),

    /// Join clauses over a namespace's current claims: the rows of values for the --find
    /// variables that satisfy every clause at once, read as of one transaction. The server
    /// picks the clause order (an index where a term is known); --explain shows the plan
    /// with each step's rows.
    #[command(after_help = crate::queryjson::QUERY_HELP)]
    Query(QueryArgs),

    /// Find facts by their words: BM25 over string values, re-ranked by recency and by the
    /// priors (verified first, then confidence). Each hit says which signals ranked it.
    #[command(
        after_help = "EXAMPLES\n  engram search --ns team/a \"deploy key rotation\"\n  \
        engram search --ns team/a incident --attribute :note/text --agent planner --k 5\n  \
        engram search --ns team/a incident --as-of-tx 120 --json"
    )]
    Search(SearchArgs),

    /// Show what changed between two transactions, for an entity or a whole namespace:
    /// the datoms asserted and retracted by transactions after --from-tx up to --to-tx.
    #[command(
        after_help = "EXAMPLES\n  engram diff --ns team/a --from-tx 10 --to-tx 40\n  \
        engram diff --ns team/a --entity 12 --from-tx 10          # since tx 10\n  \
        engram diff --ns team/a --from-tx 10 --json"
    )]
    Diff(DiffArgs),

    /// Follow a namespace's committed transactions as they happen (Ctrl-C to stop).
    #[command(after_help = "EXAMPLES\n  engram watch --ns team/a\n  \
        engram watch --ns team/a --from-tx 120 --attribute :task/status --json")]
    Watch(WatchArgs),

    /// Forget the values of an entity's datoms (or of one attribute), or of every datom of a
    /// namespace that a predicate matches (--written-by, --value, ...), on main and on every
    /// branch, on every replica: each datom keeps every other field and the hash its audit
    /// entry committed to, so the chain and every proof keep verifying, and the redaction
    /// itself is recorded in the chain with its reason. A value goes out of its slot whole: every datom of the entity and
    /// attribute that holds a value taken goes with it (another agent's retraction of it too).
    /// Needs the `redact` grant in enforced mode. Try --dry-run first.
    /// Each node then purges the values from its own files in the background: `engram redact
    /// status TX` says where each node is.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_help = "EXAMPLES\n  engram redact --ns team/a --entity 12 --attribute :person/email \\\n    \
        --reason 'erasure request 2026-114' --dry-run\n  \
        engram redact --ns team/a --entity 12 --reason 'leaked API key' --json\n  \
        engram redact --ns crm/eu --written-by crawler --reason 'crawled without consent' --dry-run\n  \
        engram redact --ns chat/scratch --all --reason 'end of the pilot'\n  \
        engram redact status 4711 --wait"
    )]
    Redact(RedactCli),

    /// Declare attributes (value type, cardinality, uniqueness, index, doc) and migrate them
    /// forward; show a namespace's schema now or as of a transaction.
    #[command(subcommand)]
    Schema(SchemaCommand),

    /// Work on isolated branches of a namespace: create one from any transaction, write to it
    /// (`transact` with "branch"), read it (`--branch` on get, history, find, watch), diff it
    /// against main, merge it as one transaction, or abandon it.
    #[command(subcommand)]
    Branch(BranchCommand),

    /// Inspect and verify the signed, hash-chained audit log.
    #[command(subcommand)]
    Audit(AuditCommand),

    /// The background work each node given with -e ran, newest first: snapshots built and
    /// installed, redaction purges, retention rounds, divergence checks, search index rebuilds
    /// and backups, each with its start, duration, outcome and figures. Each node keeps its
    /// own log (the last 256 jobs of each kind); a job the node stopped inside is listed as
    /// interrupted. Needs read on engram.system in enforced mode.
    #[command(after_help = "EXAMPLES\n  engram -e n1:7001 -e n2:7001 -e n3:7001 jobs\n  \
        engram -e n1:7001 jobs --kind snapshot-build --limit 5 --json")]
    Jobs(JobsArgs),

    /// Each node's metrics at a glance: calls and failed calls, call and log-sync p99, store
    /// size, open watches and how far the furthest behind is, search-index lag, storage
    /// corruptions and failed jobs; one column per node given with -e, all asked at once.
    /// `--raw` prints each node's whole Prometheus text, as its /metrics port serves it, for
    /// a node whose port is not scraped or not reachable. Exit code 1 if a node does not
    /// answer (after printing the others). Needs read on engram.system in enforced mode.
    #[command(
        after_help = "EXAMPLES\n  engram -e n1:7001 -e n2:7001 -e n3:7001 metrics\n  \
        engram -e n1:7001 metrics --raw | grep engram_rpc_requests_total\n  \
        engram -e n1:7001 -e n2:7001 metrics --json | jq '.nodes[].metrics.watch_lag_entries'"
    )]
    Metrics(MetricsArgs),

    /// Take an online, consistent backup of a node's state into one file, while writes go on.
    ///
    /// The file holds every replicated row as of one applied entry and a checkpoint the node
    /// signs over the audit chain in it; it checks itself (`engram audit verify --backup FILE`)
    /// and `engram restore` builds a new cluster from it. Asks the first endpoint (a follower's
    /// backup ends at the entry it has applied). Needs cluster-admin in enforced mode.
    #[command(
        after_help = "EXAMPLES\n  engram -e 127.0.0.1:7001 backup --out engram.backup\n  \
        engram audit verify --backup engram.backup\n  \
        engram backup --out /backups/$(date +%F).backup --json"
    )]
    Backup(BackupArgs),

    /// Build a new node's store from a backup: a one-node cluster that others then join.
    ///
    /// Verifies the backup first (as `audit verify --backup` does). The node keeps signing the
    /// same chain, so it needs the node key of one of the backed-up cluster's members (its
    /// node.key) and becomes that member's id. Start it with `engram serve`, then start new
    /// nodes with `--join --peer ID=ADDR` pointing at it: each gets the state and a key of its
    /// own. Restore only where the backed-up cluster no longer runs: two clusters writing with
    /// one key fork the chain.
    #[command(
        after_help = "EXAMPLES\n  engram restore --backup engram.backup --data-dir /var/lib/engram/1 \\\n    \
        --key-file old-node1.key --addr 10.0.0.5:7001\n  \
        engram serve --id 1 --listen 0.0.0.0:7001 --advertise 10.0.0.5:7001 --data-dir /var/lib/engram/1\n  \
        engram serve --id 2 --listen 0.0.0.0:7001 --advertise 10.0.0.6:7001 --data-dir /var/lib/engram/2 \\\n    \
        --join --peer 1=10.0.0.5:7001"
    )]
    Restore(RestoreArgs),

    /// Ask a node's gRPC health service whether it is SERVING (exit 0) or not (exit 1): the
    /// container health check and a scriptable readiness probe.
    Health(HealthArgs),

    /// Start a local 3-node cluster, run concurrent agents, kill the leader mid-run, restart it,
    /// and check that no acknowledged write was lost and every chain verifies.
    #[command(after_help = "EXAMPLES\n  cargo run --release -p engram-cli -- demo\n  \
        engram demo --agents 8 --duration-secs 30 --data-dir /tmp/engram-demo\n  \
        engram demo --json | jq .checks")]
    Demo(DemoArgs),
}

#[derive(Args, Debug)]
pub struct HealthArgs {
    /// The health service to ask: `engram.live` (the server answers), `engram.ready` (a caught-up
    /// member with a verified chain tip; also the default service "").
    #[arg(long, default_value = "engram.ready", value_name = "NAME")]
    pub service: String,
    /// Give up after this long.
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// This node's id (≥ 1), unique in the cluster [default: from --pod-name].
    #[arg(long = "id", env = "ENGRAM_NODE_ID", value_name = "N")]
    pub node_id: Option<u64>,

    /// The pod name of a StatefulSet member, `<name>-<ordinal>`: without --id, the node id is
    /// the ordinal + 1 (so the image needs no shell to compute it).
    #[arg(long, env = "ENGRAM_POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,

    /// Address the gRPC server binds.
    #[arg(long, env = "ENGRAM_LISTEN", value_name = "HOST:PORT")]
    pub listen: SocketAddr,

    /// Directory of the node's store and (unless --key-file) its signing key.
    #[arg(long, env = "ENGRAM_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,

    /// Address other nodes and clients use to reach this node [default: the listen address].
    #[arg(long, env = "ENGRAM_ADVERTISE_ADDR", value_name = "HOST:PORT")]
    pub advertise: Option<String>,

    /// An initial voter, as ID=HOST:PORT (this node may be among them). Repeat or separate
    /// with commas.
    #[arg(
        long = "peer",
        env = "ENGRAM_PEERS",
        value_delimiter = ',',
        value_name = "ID=HOST:PORT"
    )]
    pub peers: Vec<Peer>,

    /// Initialise the cluster from --peer (this node alone if none) once all peers answer,
    /// unless already initialised; the lowest id does it. Safe to leave on across restarts.
    /// (From the environment: true/false, 1/0, yes/no, on/off.)
    #[arg(long, env = "ENGRAM_BOOTSTRAP", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub bootstrap: bool,

    /// Join the cluster the peers (--peer) belong to: until this node is a voter, ask them to
    /// add it (as a learner, promoted to voter once caught up; asked again while it is left a
    /// learner). With --bootstrap too, the initial voters bootstrap only if no peer has a
    /// cluster yet, so one setting serves every pod of a StatefulSet and every restart.
    #[arg(long, env = "ENGRAM_JOIN", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub join: bool,

    /// The security mode to record: with --bootstrap this node records it; without, an
    /// `engram cluster init` asking for another mode or administrator is refused (see
    /// `engram cluster init --help`).
    #[arg(
        long,
        env = "ENGRAM_SECURITY",
        default_value = "open",
        value_name = "open|enforced"
    )]
    pub security: engram_access::Mode,

    /// With --security enforced: the first administrator, as NAME=PUBLIC_KEY (64 hex
    /// characters, as `engram agent keygen` prints it); the only one an Init may name.
    #[arg(long, env = "ENGRAM_ADMIN", value_name = "NAME=PUBLIC_KEY", value_parser = parse_admin)]
    pub admin: Option<(engram_access::Principal, engram_audit::PublicKey)>,

    /// Serve open mode to anyone who reaches this node. Without it, a node listening beyond
    /// loopback (0.0.0.0, ::, a LAN address) whose cluster is not enforced serves remote callers
    /// only what it takes to become enforced (`engram cluster init --security enforced
    /// --admin-key FILE`), and refuses to start if it would record open mode or its chain
    /// records it. Membership, key and policy changes in open mode are taken from loopback only,
    /// with or without it. Logged as a warning at start; /metrics: engram_insecure_open 1.
    /// (From the environment: true/false, 1/0, yes/no, on/off.)
    #[arg(long, env = "ENGRAM_INSECURE_OPEN", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure_open: bool,

    /// With --join, in an enforced cluster: the agent key file (of an agent granted
    /// cluster-admin) this node signs its request to be added with; read at each attempt, so
    /// it may appear after the node starts.
    #[arg(long, env = "ENGRAM_JOIN_AGENT_KEY", value_name = "FILE")]
    pub join_agent_key: Option<PathBuf>,

    /// Serve Prometheus metrics (Raft position, audit chain, readiness) at /metrics over plain
    /// HTTP on this address, e.g. 0.0.0.0:9090.
    #[arg(long, env = "ENGRAM_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<SocketAddr>,

    /// Serve mutual TLS: clients and peers must present a certificate signed by this CA (PEM).
    /// The node's own certificate and key are --tls-cert and --tls-key; it presents them to
    /// peers too, and checks theirs against this CA.
    #[arg(long, env = "ENGRAM_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// Also serve the gRPC health service, alone and in plaintext, on this address: for probes
    /// that cannot speak TLS (Kubernetes' gRPC probes).
    #[arg(long, env = "ENGRAM_HEALTH_LISTEN", value_name = "HOST:PORT")]
    pub health_listen: Option<SocketAddr>,

    /// A 32-byte Ed25519 seed (raw or hex) to sign audit entries with [default:
    /// DIR/node.key, generated on first start].
    #[arg(long, env = "ENGRAM_KEY_FILE", value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// On the first start, build the data directory from this backup (`engram backup --out`)
    /// as `engram restore` would, if this is node --restore-node and the directory holds no
    /// store (`lost+found` aside). Refused while a peer answers as a member of a running
    /// cluster. Other nodes start as without it and join the restored one (--join); a restart
    /// after the restore starts from the store. Needs --key-file: the backed-up node's key.
    #[arg(long, env = "ENGRAM_RESTORE_FROM", value_name = "FILE")]
    pub restore_from: Option<PathBuf>,

    /// With --restore-from: the node that restores the backup; the key given must be its key
    /// in the backup's chain.
    #[arg(long, env = "ENGRAM_RESTORE_NODE", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub restore_node: u64,

    /// Record the reads, watches and exports this node serves on namespaces under PREFIX in
    /// its access log (repeat, or comma-separate; `*` logs everything, exports included):
    /// who read what, and when, signed by the node (`engram access`).
    #[arg(long, env = "ENGRAM_ACCESS_LOG", value_name = "PREFIX", value_delimiter = ',')]
    pub access_log: Vec<String>,

    /// Largest encoded transaction accepted, in bytes [default: 1 MiB].
    #[arg(long, env = "ENGRAM_MAX_TX_BYTES", value_name = "BYTES")]
    pub max_tx_bytes: Option<usize>,

    /// End a watch whose reader has taken nothing for this long while its buffer is full,
    /// with UNAVAILABLE and the transaction to reopen at (the client libraries reopen it)
    /// [default: 30000].
    #[arg(long, env = "ENGRAM_WATCH_STALL_CUTOFF_MS", value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub watch_stall_cutoff_ms: Option<u64>,

    /// Raft heartbeat interval [default: 100]. It is also the deadline of every Raft RPC
    /// (appends carrying entries may get longer, --append-timeout-ms), so it must exceed the
    /// network round trip between nodes.
    #[arg(long, env = "ENGRAM_HEARTBEAT_INTERVAL_MS", value_name = "MS")]
    pub heartbeat_interval_ms: Option<u64>,

    /// Deadline of a replication RPC that carries log entries: followers may need longer than
    /// a heartbeat to receive and fsync large batches, as in bulk loads; 0 means the
    /// heartbeat interval [default: 1000].
    #[arg(long, env = "ENGRAM_APPEND_TIMEOUT_MS", value_name = "MS")]
    pub append_timeout_ms: Option<u64>,

    /// Lower bound of the randomised election timeout [default: 200]. A follower stands for
    /// election after the leader's lease (the upper bound) plus a draw between the bounds.
    #[arg(long, env = "ENGRAM_ELECTION_TIMEOUT_MIN_MS", value_name = "MS")]
    pub election_timeout_min_ms: Option<u64>,

    /// Upper bound of the randomised election timeout, also the leader's lease [default: 400].
    #[arg(long, env = "ENGRAM_ELECTION_TIMEOUT_MAX_MS", value_name = "MS")]
    pub election_timeout_max_ms: Option<u64>,

    /// Build a snapshot and purge the log every this many applied entries [default: 5000].
    #[arg(long, env = "ENGRAM_SNAPSHOT_EVERY_ENTRIES", value_name = "N")]
    pub snapshot_every_entries: Option<u64>,

    /// Sign a checkpoint of the audit chain after this many entries; 0 turns the count
    /// trigger off [default: 1000].
    #[arg(long, env = "ENGRAM_CHECKPOINT_EVERY_ENTRIES", value_name = "N")]
    pub checkpoint_every_entries: Option<u64>,

    /// Sign a checkpoint once this much transaction time has passed since the last one; 0
    /// turns the time trigger off [default: 1000].
    #[arg(long, env = "ENGRAM_CHECKPOINT_EVERY_MS", value_name = "MS")]
    pub checkpoint_every_ms: Option<u64>,

    /// Compare this node's audit chain with every peer's this often; on a mismatch the node
    /// raises the divergence alarm (logs the first divergent entry and peer, reports not
    /// ready, refuses writes until restarted). 0 turns the check off [default: 5000].
    #[arg(long, env = "ENGRAM_DIVERGENCE_CHECK_MS", value_name = "MS")]
    pub divergence_check_ms: Option<u64>,
    /// While leading, apply the retention policies (`engram retention`) this often: redact
    /// what each keeps no longer. 0 turns retention off on this node [default: 60000].
    #[arg(long, env = "ENGRAM_RETENTION_CHECK_MS", value_name = "MS")]
    pub retention_check_ms: Option<u64>,
    /// While leading, look for lapsed sessions (`engram session`) this often: a session is
    /// ended and its namespace forgotten at most this long after its deadline. 0 turns it off
    /// on this node [default: 1000].
    #[arg(long, env = "ENGRAM_SESSION_CHECK_MS", value_name = "MS")]
    pub session_check_ms: Option<u64>,
    /// Save this node's recall index (`DATA_DIR/recall.index`) this often when it has taken
    /// in something new, so a restart feeds it only what was applied since the save instead
    /// of rebuilding it from the whole log. A redaction removes the save at once; the index
    /// is rebuilt from the store once the purge is done and saved again. 0 turns saves off
    /// [default: 60000].
    #[arg(long, env = "ENGRAM_RECALL_SAVE_MS", value_name = "MS")]
    pub recall_save_ms: Option<u64>,
    /// What to check of the store before serving: `none`; `tip` (the chain tip decodes, links,
    /// is attested by a trusted key and is what the head row names; its datoms reproduce its
    /// content hash and have their index rows); `sample` (the same for the last 1024 entries);
    /// `full` (the whole chain, every row of every space with checksums, every index row and
    /// datom, as `engram audit verify --data-dir`). A node that fails does not start
    /// [default: tip].
    #[arg(long, env = "ENGRAM_VERIFY_ON_START", value_name = "none|tip|sample|full")]
    pub verify_on_start: Option<engram_core::scrub::StartCheck>,

    /// Export traces over OTLP/gRPC to this collector, e.g. http://localhost:4317.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// How the node writes its logs to stderr: `text` (one readable line per event) or `json`
    /// (one JSON object per line, with `timestamp`, `level`, `message`, the event's fields
    /// and its span, for a log collector). `RUST_LOG` filters both.
    #[arg(
        long,
        env = "ENGRAM_LOG_FORMAT",
        value_name = "text|json",
        default_value = "text"
    )]
    pub log_format: engram_server::telemetry::LogFormat,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Initialise a new cluster: run once, against one node, naming every initial voter.
    #[command(
        after_help = "EXAMPLES\n  engram --endpoint 127.0.0.1:7001 cluster init \\\n    \
        --member 1=127.0.0.1:7001 --member 2=127.0.0.1:7002 --member 3=127.0.0.1:7003"
    )]
    Init {
        /// An initial voter as ID=HOST:PORT (its gRPC address); repeat for each. The nodes'
        /// public keys are fetched by the server.
        #[arg(
            long = "member",
            value_delimiter = ',',
            required = true,
            value_name = "ID=HOST:PORT"
        )]
        members: Vec<Peer>,
        /// open: anyone who reaches a node may do anything (every node warns at start);
        /// enforced: every request must be signed by a registered agent key and allowed by a
        /// grant. Recorded in the chain right after genesis; it cannot change later.
        #[arg(long, default_value = "open", value_name = "open|enforced")]
        security: engram_access::Mode,
        /// Enforced mode: the first administrator's key file (its name and public key are
        /// sent; the secret stays here). It is granted every action on every namespace.
        #[arg(long, value_name = "FILE")]
        admin_key: Option<PathBuf>,
    },

    /// Show each endpoint's view: role, leader, term, log and chain positions.
    #[command(
        after_help = "EXAMPLES\n  engram -e 127.0.0.1:7001 -e 127.0.0.1:7002 -e 127.0.0.1:7003 cluster status\n  \
        ENGRAM_ENDPOINTS=n1:7001,n2:7001 engram cluster status --json"
    )]
    Status,

    /// Add a node; it is promoted to voter once caught up unless --learner-only.
    #[command(after_help = "EXAMPLES\n  engram cluster add --id 4 --addr 127.0.0.1:7004")]
    Add {
        #[arg(long, value_name = "N")]
        id: u64,
        /// The new node's gRPC address.
        #[arg(long, value_name = "HOST:PORT")]
        addr: String,
        /// Keep it a non-voting learner.
        #[arg(long)]
        learner_only: bool,
    },

    /// Shrink the membership to nodes 1..=N: remove every member with a larger id, one at a
    /// time, newest first. Refuses (and removes nothing) unless nodes 1..=N are all members,
    /// answer, and have caught up with the leader, so quorum survives. Safe to repeat.
    #[command(after_help = "EXAMPLES\n  engram cluster shrink --to 3")]
    Shrink {
        #[arg(long = "to", value_name = "N")]
        to: u64,
    },

    /// Remove a node from the membership.
    #[command(after_help = "EXAMPLES\n  engram cluster remove --id 4")]
    Remove {
        #[arg(long, value_name = "N")]
        id: u64,
    },

    /// Rotate a node's signing key: the node generates a new key, keeps it beside the old one
    /// and records the change in the audit chain, signed by the old key; it signs with the new
    /// key from that entry on. Send it to the node itself (--endpoint).
    #[command(after_help = "EXAMPLES\n  engram --endpoint 127.0.0.1:7002 cluster rotate-key --id 2")]
    RotateKey {
        #[arg(long, value_name = "N")]
        id: u64,
    },

    /// Revoke a node's signing key (it is compromised): a key-change entry in the audit chain,
    /// authorised by the leader. Attestations and checkpoints by the key after this point, and
    /// every checkpoint it ever signed, are refused by verifiers. The node stops for good: it
    /// attests nothing more and reports NOT_SERVING until it is removed (`cluster remove`) and
    /// added back with a new key. Revoking a majority's keys leaves the cluster unable to write.
    #[command(
        after_help = "EXAMPLES\n  engram cluster revoke-key --id 4\n  engram cluster revoke-key --id 4 --key-id 1a2b3c4d5e6f7081"
    )]
    RevokeKey {
        #[arg(long, value_name = "N")]
        id: u64,
        /// The key to revoke, as its 16-hex-digit key id [default: the node's current key].
        #[arg(long, value_name = "HEX")]
        key_id: Option<String>,
    },
}

const TX_FORMAT_EXAMPLES: &str = "EXAMPLES\n  engram transact tx.json\n  \
    echo '{\"namespace\":\"team/a\",\"agent\":\"planner\",\"ops\":[{\"entity\":\"t\",\
\"attribute\":\":task/title\",\"value\":{\"string\":\"Ship it\"}}]}' | engram transact\n\n\
    See `engram transact --help` for the JSON format.";

#[derive(Args, Debug)]
pub struct TransactArgs {
    /// JSON file with the transaction; `-` or nothing reads stdin. The format is below.
    #[arg(value_name = "FILE|-", default_value = "-")]
    pub file: String,
    /// Print only the entity id the transaction gave the temporary name NAME (for scripts:
    /// `E=$(engram transact tx.json --print-id task)`); an error if NAME made no new entity.
    #[arg(long, value_name = "NAME")]
    pub print_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    #[arg(long, value_name = "N")]
    pub entity: u64,
    /// Read as of this transaction (inclusive).
    #[arg(long, value_name = "TX")]
    pub as_of_tx: Option<u64>,
    /// Read as of the last transaction at or before this instant (ns since the Unix epoch,
    /// transaction time): what the memory held then.
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "as_of_tx",
        allow_negative_numbers = true
    )]
    pub as_of_time_ns: Option<i64>,
    /// Only facts valid at this instant (ns since the Unix epoch).
    #[arg(long, value_name = "NS", allow_negative_numbers = true)]
    pub valid_at_ns: Option<i64>,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
    /// Verify the answer: check the audit chain, then a Merkle proof for every datom against
    /// a signed checkpoint. Exits 2 if a proof fails.
    #[arg(long)]
    pub verify: bool,
    /// Verify that the answer is complete and current: every attribute the entity has, each
    /// with its whole history, proven against the state root a signed checkpoint covers, and
    /// folded here into the answer (implies --verify). With --as-of-tx, the same histories
    /// folded as of that transaction: the answer then, proven complete. Of main, so not with
    /// --branch or --as-of-time-ns. An unknown entity's absence is proven. Exits 2 if a proof
    /// fails.
    #[arg(long, conflicts_with_all = ["branch", "as_of_time_ns"])]
    pub complete: bool,
    /// Read this branch: main as of its fork plus the branch's own writes [default: main].
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// How to pick the current value when agents disagree: the latest claim, or the best
    /// verified one (verified before candidate, then confidence, then newest). The others are
    /// listed as conflicts.
    #[arg(long, value_enum, default_value_t = RuleArg::Latest)]
    pub rule: RuleArg,
    /// Ignore candidate claims entirely.
    #[arg(long)]
    pub verified_only: bool,
    /// Include entities whose :memory/expires has passed (reads of the current state leave
    /// them out; reads with --as-of-tx never do).
    #[arg(long)]
    pub include_expired: bool,
}

/// `engram redact`: a redaction (its flags), or a subcommand about redactions.
#[derive(clap::Args, Debug)]
pub struct RedactCli {
    #[command(subcommand)]
    pub command: Option<RedactCommand>,
    #[command(flatten)]
    pub args: Option<RedactArgs>,
}

#[derive(Subcommand, Debug)]
pub enum RedactCommand {
    /// Per node (each --endpoint given): whether it has applied the redaction of transaction
    /// TX and every one before it, and whether it has purged their values from its files
    /// (Raft log, snapshots, store files). Exits non-zero when a node does not answer, or with
    /// --wait when the deadline passes first.
    #[command(
        after_help = "EXAMPLES\n  engram --endpoint n1:7001,n2:7001,n3:7001 redact status 4711\n  \
        engram redact status 4711 --wait --timeout-secs 600 --json"
    )]
    Status(RedactStatusArgs),
}

/// `engram retention`: what is kept how long.
#[derive(Subcommand, Debug)]
pub enum RetentionCommand {
    /// Keep what is written to a namespace (or one attribute of it) for a while: the leader
    /// redacts every datom written longer ago, checking every --retention-check-ms (serve).
    /// A policy change, recorded in the audit chain; needs `redact` on the namespace.
    /// With --keep-versions N instead: of each slot (entity, attribute), what the last N
    /// transactions that wrote it hold is kept, and its live claims; older datoms are redacted.
    #[command(after_help = "EXAMPLES\n  engram retention set --ns team/chat --keep 30d\n  \
        engram retention set --ns team/chat --attribute :msg/text --keep 12h\n  \
        engram retention set --ns team/plans --attribute :plan/text --keep-versions 3")]
    Set(RetentionSetArgs),
    /// End a retention policy: nothing more is redacted for it (what went stays gone).
    #[command(after_help = "EXAMPLES\n  engram retention off --ns team/chat\n  \
        engram retention off --ns team/plans --attribute :plan/text --versions")]
    Off(RetentionOffArgs),
    /// The retention policies in force.
    #[command(after_help = "EXAMPLES\n  engram retention list --json")]
    List,
}

/// `engram session`: volatile namespaces.
#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Open a session on a namespace: it lapses after --ttl unless renewed, and when it ends or
    /// lapses the leader forgets everything written to the namespace before the end (recorded
    /// as redactions by agent engram.session). A policy change; needs `redact` on the namespace.
    #[command(
        after_help = "EXAMPLES\n  engram session open --ns scratch/run-42 --ttl 15m\n  \
        engram session open --ns scratch/run-42 --ttl 15m --json"
    )]
    Open(SessionOpenArgs),
    /// Renew the session open on a namespace: it lapses --ttl from now.
    #[command(after_help = "EXAMPLES\n  engram session renew --ns scratch/run-42 --ttl 15m")]
    Renew(SessionOpenArgs),
    /// End the session on a namespace now: the leader forgets what was written there.
    #[command(after_help = "EXAMPLES\n  engram session end --ns scratch/run-42")]
    End(SessionEndArgs),
    /// The sessions open, and each namespace's last ended session.
    #[command(after_help = "EXAMPLES\n  engram session list --json")]
    List,
}

#[derive(clap::Args, Debug)]
pub struct SessionOpenArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// How long the session lives without a renewal: a number with a unit, ms, s, m, h or d.
    #[arg(long, value_name = "DURATION", value_parser = parse_keep_ms)]
    pub ttl: u64,
}

#[derive(clap::Args, Debug)]
pub struct SessionEndArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
}

#[derive(clap::Args, Debug)]
pub struct RetentionTarget {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// Only this attribute's datoms [default: the whole namespace].
    #[arg(long, value_name = "ATTR")]
    pub attribute: Option<String>,
}

#[derive(clap::Args, Debug)]
#[group(id = "rule", required = true, multiple = false, args = ["keep", "keep_versions"])]
pub struct RetentionSetArgs {
    #[command(flatten)]
    pub target: RetentionTarget,
    /// How long what is written is kept: a number with a unit, ms, s, m, h or d (e.g. 30d).
    #[arg(long, value_name = "DURATION", value_parser = parse_keep_ms)]
    pub keep: Option<u64>,
    /// How many versions of each slot are kept: the datoms of its last N writing transactions,
    /// and its live claims whatever their age.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_versions: Option<u32>,
}

#[derive(clap::Args, Debug)]
pub struct RetentionOffArgs {
    #[command(flatten)]
    pub target: RetentionTarget,
    /// End the versions policy (set with --keep-versions) instead of the time policy.
    #[arg(long)]
    pub versions: bool,
}

/// A duration with a unit (`ms`, `s`, `m`, `h`, `d`), in milliseconds; at least 1 ms.
pub fn parse_keep_ms(raw: &str) -> Result<u64, String> {
    let split = raw
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{raw:?} has no unit: write e.g. 30d, 12h, 90m, 45s or 500ms"))?;
    let (digits, unit) = raw.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} does not start with a number"))?;
    let per_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("unknown unit {unit:?}: use ms, s, m, h or d")),
    };
    match n.checked_mul(per_ms) {
        Some(0) => Err("a retention of 0 keeps nothing: use `engram retention off` to end one".into()),
        Some(ms) => Ok(ms),
        None => Err(format!("{raw:?} is too long")),
    }
}

#[derive(clap::Args, Debug)]
pub struct RedactStatusArgs {
    /// The redaction's transaction (the `tx` that `engram redact` printed).
    #[arg(value_name = "TX")]
    pub tx: u64,
    /// Ask again every second until every node has purged it.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub timeout_secs: u64,
}

#[derive(clap::Args, Debug)]
pub struct RedactArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The entity whose datoms go. Without it, the datoms of the namespace that the predicate
    /// flags match go (--attribute, --written-by, --value, --before-tx, --written-before-ns,
    /// --valid-from-before-ns), or with --all every datom of the namespace: any number, in
    /// ranges of at most 1,000 datoms, each its own transaction.
    #[arg(long, value_name = "N")]
    pub entity: Option<u64>,
    /// Only this attribute's datoms [default: every attribute].
    #[arg(long, value_name = "ATTR")]
    pub attribute: Option<String>,
    /// Without --entity: every datom of the namespace.
    #[arg(long, conflicts_with_all = ["entity", "written_by", "value", "before_tx", "written_before_ns", "valid_from_before_ns", "attribute"])]
    pub all: bool,
    /// Without --entity: only datoms recorded as this agent's.
    #[arg(long, value_name = "AGENT", conflicts_with = "entity")]
    pub written_by: Option<String>,
    /// Without --entity: only datoms holding this value (assertions and retractions of it), in
    /// the JSON value format, e.g. '"a@example.com"' or '{"i64":5}'.
    #[arg(long, value_name = "JSON", conflicts_with = "entity")]
    pub value: Option<String>,
    /// Without --entity: only datoms written before this transaction.
    #[arg(long, value_name = "TX", conflicts_with = "entity")]
    pub before_tx: Option<u64>,
    /// Without --entity: only datoms whose transaction time is before this instant (ns since
    /// the Unix epoch).
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "entity",
        allow_negative_numbers = true
    )]
    pub written_before_ns: Option<i64>,
    /// Without --entity: only datoms valid from before this instant (ns since the Unix epoch).
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "entity",
        allow_negative_numbers = true
    )]
    pub valid_from_before_ns: Option<i64>,
    /// Why the values go (required, at most 1 KiB). Kept in the audit chain for good, so it
    /// must not repeat what is being forgotten.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// List the datoms that would go (no values) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Who asks, recorded as the redaction's provenance [default: the --agent-key's agent, or
    /// engram-cli].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleArg {
    Latest,
    Verified,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("target").args(["entity", "attribute"]).required(true).multiple(true)))]
pub struct HistoryArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The entity whose history to list.
    #[arg(long, value_name = "N")]
    pub entity: Option<u64>,
    /// With --entity: only this attribute. Alone: this attribute across entities.
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: Option<String>,
    /// The history up to this transaction (inclusive) [default: up to the head].
    #[arg(long, value_name = "TX", conflicts_with = "verify")]
    pub as_of_tx: Option<u64>,
    /// The history up to the last transaction at or before this instant (ns since the Unix
    /// epoch, transaction time).
    #[arg(long, value_name = "NS", conflicts_with_all = ["as_of_tx", "verify"], allow_negative_numbers = true)]
    pub as_of_time_ns: Option<i64>,
    /// Only what transactions after this one wrote [default: from the first].
    #[arg(long, value_name = "TX", conflicts_with = "verify")]
    pub since_tx: Option<u64>,
    /// Only datoms valid at this instant (ns since the Unix epoch, valid time).
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "verify",
        allow_negative_numbers = true
    )]
    pub valid_at_ns: Option<i64>,
    /// At most this many datoms; the server answers in pages of up to 100,000, all read as
    /// of one transaction [default: every datom].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
    /// Verify the answer with a Merkle proof per datom (see `get --verify`).
    #[arg(long)]
    pub verify: bool,
    /// Verify that the history is whole: every datom of the entity (or of its --attribute),
    /// proven against the state root a signed checkpoint covers, up to that checkpoint or up to
    /// --as-of-tx (needs --entity; of main, so not with --branch, --as-of-time-ns, --since-tx,
    /// --valid-at-ns, --limit or --cursor). An attribute the entity never had is proven empty.
    /// Exits 2 if a proof fails.
    #[arg(long, requires = "entity", conflicts_with_all = ["branch", "as_of_time_ns", "since_tx", "valid_at_ns", "cursor", "verify"])]
    pub complete: bool,
    /// Read this branch: main as of its fork plus the branch's own writes [default: main].
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Go on from an earlier answer: the `next_cursor` it printed with --json (the rest of the
    /// command unchanged).
    #[arg(long, value_name = "HEX")]
    pub cursor: Option<String>,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// Only this entity [default: the whole namespace].
    #[arg(long, value_name = "N")]
    pub entity: Option<u64>,
    /// Changes after this transaction (exclusive).
    #[arg(long, value_name = "TX")]
    pub from_tx: u64,
    /// Up to this transaction (inclusive) [default: the head].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "TX")]
    pub to_tx: u64,
    /// At most this many datoms; the server answers in pages of up to 100,000, all up to one
    /// transaction [default: every datom].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
    /// Go on from an earlier answer: the `next_cursor` it printed with --json (the rest of the
    /// command unchanged).
    #[arg(long, value_name = "HEX")]
    pub cursor: Option<String>,
    /// Only datoms valid at this instant (ns since the Unix epoch, valid time): what changed
    /// about that moment.
    #[arg(long, value_name = "NS", allow_negative_numbers = true)]
    pub valid_at_ns: Option<i64>,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The first transaction to show; resume a watch with the last tx id shown + 1 [default:
    /// from the start].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "TX")]
    pub from_tx: u64,
    /// Only datoms of this attribute.
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: Option<String>,
    /// Only datoms of this entity.
    #[arg(long, value_name = "N")]
    pub entity: Option<u64>,
    /// Stop after this many transactions [default: never].
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Follow this branch's transactions instead of main's.
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
}

#[derive(Args, Debug)]
pub struct FindArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: String,
    /// Only datoms with this value, in the JSON value format, e.g. '{"i64":5}'.
    #[arg(long, value_name = "JSON")]
    pub value: Option<String>,
    /// Read as of this transaction (inclusive).
    #[arg(long, value_name = "TX")]
    pub as_of_tx: Option<u64>,
    /// Read as of the last transaction at or before this instant (ns since the Unix epoch,
    /// transaction time): what the memory held then.
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "as_of_tx",
        allow_negative_numbers = true
    )]
    pub as_of_time_ns: Option<i64>,
    /// At most this many datoms; the server answers in pages of up to 100,000 entities' values,
    /// all read as of one transaction [default: every datom].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
    /// Read this branch: main as of its fork plus the branch's own writes [default: main].
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Include entities whose :memory/expires has passed (reads of the current state leave
    /// them out; reads with --as-of-tx never do).
    #[arg(long)]
    pub include_expired: bool,
    /// Only current values that transactions after this one wrote: what came to hold the
    /// value since then.
    #[arg(long, value_name = "TX")]
    pub since_tx: Option<u64>,
    /// Only values valid at this instant (ns since the Unix epoch, valid time).
    #[arg(long, value_name = "NS", allow_negative_numbers = true)]
    pub valid_at_ns: Option<i64>,
    /// Go on from an earlier answer: the `next_cursor` it printed with --json (the rest of the
    /// command unchanged).
    #[arg(long, value_name = "HEX")]
    pub cursor: Option<String>,
}

/// Where a list starts and how much of it to read: shared by the list commands.
#[derive(Args, Debug)]
pub struct ListPaging {
    /// At most this many; the server answers in pages of up to 100,000 [default: all].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Go on from an earlier answer: the `next_cursor` it printed with --json (the rest of the
    /// command unchanged).
    #[arg(long, value_name = "HEX")]
    pub cursor: Option<String>,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
}

/// When a list is read as of: shared by the list commands.
#[derive(Args, Debug)]
pub struct ListAsOf {
    /// As of this transaction (inclusive).
    #[arg(long, value_name = "TX")]
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant (ns since the Unix epoch).
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "as_of_tx",
        allow_negative_numbers = true
    )]
    pub as_of_time_ns: Option<i64>,
}

#[derive(Args, Debug)]
pub struct NamespacesArgs {
    #[command(flatten)]
    pub paging: ListPaging,
}

#[derive(Args, Debug)]
pub struct EntitiesArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// Only entities with a datom of this attribute [default: every entity].
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: Option<String>,
    #[command(flatten)]
    pub as_of: ListAsOf,
    #[command(flatten)]
    pub paging: ListPaging,
}

#[derive(Args, Debug)]
pub struct ReferrersArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The entity referred to.
    #[arg(long, value_name = "N")]
    pub entity: u64,
    /// Only through this attribute [default: any you may read].
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: Option<String>,
    #[command(flatten)]
    pub as_of: ListAsOf,
    /// Only claims valid at this instant (ns since the Unix epoch, valid time).
    #[arg(long, value_name = "NS", allow_negative_numbers = true)]
    pub valid_at_ns: Option<i64>,
    #[command(flatten)]
    pub paging: ListPaging,
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The query as a JSON document (see QUERY FORMAT below).
    #[arg(
        value_name = "QUERY",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub query: Option<String>,
    /// Read the query from this file ("-": standard input).
    #[arg(long, value_name = "FILE")]
    pub file: Option<String>,
    /// Read this branch: main as of its fork plus the branch's own writes [default: main].
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    #[command(flatten)]
    pub as_of: ListAsOf,
    /// Only claims valid at this instant (ns since the Unix epoch, valid time).
    #[arg(long, value_name = "NS", allow_negative_numbers = true)]
    pub valid_at_ns: Option<i64>,
    /// Let entities whose :memory/expires has passed match too.
    #[arg(long)]
    pub include_expired: bool,
    /// The most index and datom rows one page's run may read [default: the server's,
    /// 1,000,000; at most 10,000,000].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub max_rows_read: u64,
    /// Show the plan the server ran: each clause's access path and rows.
    #[arg(long)]
    pub explain: bool,
    /// At most this many rows; the server answers in pages of up to 10,000 [default: all].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub limit: u32,
    /// Go on from an earlier answer: the `next_cursor` it printed with --json (the rest of the
    /// command unchanged).
    #[arg(long, value_name = "HEX")]
    pub cursor: Option<String>,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[arg(long = "ns", value_name = "NAMESPACE")]
    pub namespace: String,
    /// The words to look for (letters and digits; case does not matter). Optional with
    /// --vector.
    #[arg(value_name = "WORDS", required_unless_present = "vector", num_args = 0..)]
    pub words: Vec<String>,
    /// A query embedding as a JSON array of numbers, e.g. '[0.12, -0.5, 0.33]': nearest
    /// neighbours among the searchable vector attributes of that dimension (computed by your
    /// model; the server has none).
    #[arg(long, value_name = "JSON")]
    pub vector: Option<String>,
    /// Ref hops to walk from the best hits (graph expansion), 0 to 3 [default: 1].
    #[arg(long, value_name = "N")]
    pub hops: Option<u32>,
    /// Hits wanted, 1 to 100 [default: 10].
    #[arg(long, hide_default_value = true, default_value_t = 0, value_name = "N")]
    pub k: u32,
    /// Search as of this transaction (inclusive): what was true then, ranked as it would
    /// have been then.
    #[arg(long, value_name = "TX")]
    pub as_of_tx: Option<u64>,
    /// Read as of the last transaction at or before this instant (ns since the Unix epoch,
    /// transaction time): what the memory held then.
    #[arg(
        long,
        value_name = "NS",
        conflicts_with = "as_of_tx",
        allow_negative_numbers = true
    )]
    pub as_of_time_ns: Option<i64>,
    /// Only facts of this attribute (repeatable).
    #[arg(long, value_name = ":PREFIX/NAME")]
    pub attribute: Vec<String>,
    /// Only facts asserted by this agent (repeatable).
    #[arg(long, value_name = "AGENT")]
    pub agent: Vec<String>,
    /// Only verified facts.
    #[arg(long)]
    pub verified_only: bool,
    /// Only memories of this kind (repeatable): the entity's :memory/kind, by the
    /// agent-memory schema's short name (preference, blocker, ...) or as a keyword.
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,
    /// Include entities whose :memory/expires has passed (reads of the current state leave
    /// them out; reads with --as-of-tx never do).
    #[arg(long)]
    pub include_expired: bool,
    /// Check every hit's datom against its audit entry, a Merkle proof and a signed
    /// checkpoint (the ranking is not proven, the content is).
    #[arg(long)]
    pub verify: bool,
    /// As --verify, and prove whether each hit's fact is still current on main: its entity
    /// read proven complete against the state root, the hit looked for among its slot's live
    /// claims. A superseded hit is marked, with the claims that replaced it (--json).
    #[arg(long)]
    pub current: bool,
    /// Read the answering node's local state, possibly behind the leader.
    #[arg(long)]
    pub stale: bool,
    /// Search this branch [default: main].
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum SchemaCommand {
    /// Declare or migrate attributes, as one transaction. The first declaration makes the
    /// namespace strict: afterwards only declared attributes are accepted. Migrations only move
    /// forward (add an attribute, widen one to many, add an index or uniqueness the data
    /// allows, change the doc, deprecate); anything else is refused and nothing changes.
    /// Declarations already in force are skipped, so applying twice is harmless.
    #[command(after_help = SCHEMA_FORMAT_HELP)]
    Apply {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        /// A built-in schema: agent-memory (fact, preference, procedure, blocker, reference,
        /// identity; see docs/agent-memory.md).
        #[arg(long, value_name = "NAME", conflicts_with = "file")]
        preset: Option<String>,
        /// A JSON file with the declarations (format below).
        #[arg(long, value_name = "FILE")]
        file: Option<String>,
        /// Who makes the change (recorded in provenance).
        #[arg(long, default_value = "engram-cli", value_name = "NAME")]
        agent: String,
    },
    /// Show a namespace's attributes: type, cardinality, uniqueness, index, since which
    /// transaction and schema version.
    Show {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        /// The schema in force at this transaction.
        #[arg(long, value_name = "TX")]
        as_of_tx: Option<u64>,
        /// Read the answering node's local state, possibly behind the leader.
        #[arg(long)]
        stale: bool,
    },
}

const SCHEMA_FORMAT_HELP: &str = r#"SCHEMA FORMAT (JSON): an array of declarations
  [ { "ident": ":memory/key",          required, :prefix/name (the :db prefixes are reserved)
      "type": "string",                required: string i64 f64 bool bytes instant ref keyword json vector
      "cardinality": "one",            "one" (default) or "many"
      "unique": "identity",            optional: "identity" (upsert, lookup refs) or "value"
      "indexed": true,                 optional: keep a value index for find by value
      "component": false,              optional: ref attributes only
      "doc": "what it means",          optional
      "deprecated": false,             optional: closed for new assertions
      "searchable": true,              optional: string and vector attributes; found by `engram search`
      "dimension": 384 } ]             vector attributes: components per value (1 to 4096)

EXAMPLES
  engram schema apply --ns team/a --preset agent-memory
  engram schema apply --ns team/a --file schema.json
  engram schema show --ns team/a --as-of-tx 12"#;

#[derive(Subcommand, Debug)]
pub enum BranchCommand {
    /// Fork a branch from main as of a transaction (default: the head).
    Create {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        /// The branch name: A-Z a-z 0-9 _ - . (not "main").
        name: String,
        /// The fork point: reads on the branch see main as of this transaction.
        #[arg(long, value_name = "TX")]
        from_tx: Option<u64>,
        #[arg(long, default_value = "engram-cli", value_name = "NAME")]
        agent: String,
    },
    /// List the namespace's branches with their state, fork point and number of writes.
    List {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        #[arg(long)]
        stale: bool,
    },
    /// What the branch wrote (what a merge would apply), and what main changed since the fork
    /// on the same entity attributes (what a merge would conflict with).
    Diff {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        name: String,
        /// Only this entity.
        #[arg(long, value_name = "N")]
        entity: Option<u64>,
        #[arg(long)]
        stale: bool,
    },
    /// Apply the branch's writes to main as one transaction, after re-checking them against
    /// main now. A conflict is refused and nothing is applied.
    Merge {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        name: String,
        #[arg(long, default_value = "engram-cli", value_name = "NAME")]
        agent: String,
    },
    /// Close the branch without merging; its writes stay in its history and the audit chain.
    Abandon {
        #[arg(long = "ns", value_name = "NAMESPACE")]
        namespace: String,
        name: String,
        #[arg(long, default_value = "engram-cli", value_name = "NAME")]
        agent: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Verify an audit chain: a live node's (default), an export file, a stopped node's store, or
    /// a backup.
    ///
    /// Live: pulls the whole chain from a node and checks every link and signature.
    ///
    /// Offline (FILE, --data-dir or --backup): checks every link, attestation and key change, every
    /// transaction's datoms against the content hash its entry records, the Merkle root of the
    /// entries against every checkpoint and every checkpoint's signature against the key
    /// history, and (with --pin) that the chain contains a checkpoint obtained earlier.
    ///
    /// Names the exact index and field of the first failure (--all: every failure). Exits 0 if
    /// everything verifies, 2 if something was tampered with, 3 if the input cannot be read
    /// (offline), 1 for other errors.
    #[command(
        after_help = "EXAMPLES\n  engram audit verify\n  engram -e n1:7001 -e n2:7001 -e n3:7001 audit verify --each\n  \
        engram audit verify chain.engram-audit --pin checkpoint.txt\n  \
        engram audit verify --data-dir /var/lib/engram/1 --all --json\n  \
        engram audit verify --backup engram.backup"
    )]
    Verify(VerifyArgs),

    /// Write the chain, its transactions' datoms, checkpoints and key history to a portable
    /// file that `engram audit verify FILE` checks with no cluster at hand.
    #[command(after_help = "EXAMPLES\n  engram audit export --out chain.engram-audit\n  \
        engram audit export --data-dir /var/lib/engram/1 --out node1.engram-audit")]
    Export {
        /// Where to write the export (written to a temporary file, renamed when complete).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Export a stopped node's store instead of asking a live node.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },

    /// Print a signed checkpoint (C2SP tlog-checkpoint signed note); save it to pin later
    /// verifications with `audit verify --pin`.
    #[command(
        after_help = "EXAMPLES\n  engram audit checkpoint\n  engram audit checkpoint --at-head --out checkpoint.txt"
    )]
    Checkpoint {
        /// A checkpoint of the node's current head, signed now (default: the latest one the
        /// node signed by its checkpoint policy).
        #[arg(long)]
        at_head: bool,
        /// Also write the note to this file.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },

    /// Show the tip of the chain (index, hash, tx, time) as the answering node has it.
    #[command(after_help = "EXAMPLES\n  engram audit head\n  engram -e 127.0.0.1:7002 audit head --json")]
    Head,

    /// List chain entries.
    #[command(after_help = "EXAMPLES\n  engram audit entries --from 1 --limit 20")]
    Entries {
        /// First index (1-based).
        #[arg(long, default_value_t = 1, value_name = "INDEX")]
        from: u64,
        /// At most this many entries (0: up to the head).
        #[arg(long, default_value_t = 0, value_name = "N")]
        limit: u64,
    },
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Where to write the backup (written to FILE.partial, checked, then renamed).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file (`engram backup --out FILE`).
    #[arg(long, value_name = "FILE")]
    pub backup: PathBuf,
    /// The new node's data directory: must not exist, or hold nothing but `lost+found`. It
    /// may be a volume's mount point: the store is built in DIR/.restoring and moved into
    /// place once whole; DIR itself is never replaced.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// The node key (a backed-up member's node.key) the restored node signs with; copied to
    /// DIR/node.key.
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,
    /// The address other nodes and clients reach the restored node at (its --advertise).
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: String,
    /// The node id to restore as [default: the key's node in the backup's chain, which is the
    /// only one allowed].
    #[arg(long = "id", value_name = "N")]
    pub node_id: Option<u64>,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("offline").args(["file", "data_dir", "backup"])))]
pub struct VerifyArgs {
    /// An export file written by `engram audit export`.
    #[arg(value_name = "FILE", conflicts_with_all = ["data_dir", "each", "backup"])]
    pub file: Option<PathBuf>,
    /// A backup file written by `engram backup`: its checksum, its state (every audit entry, every
    /// transaction's datoms, every row as the --data-dir check reads them, in a temporary copy)
    /// and the checkpoint it carries, which must cover its chain and be signed by a key the chain
    /// trusts.
    #[arg(long, value_name = "BACKUP", conflicts_with_all = ["data_dir", "each"])]
    pub backup: Option<PathBuf>,
    /// A stopped node's data directory (the one given to `engram serve --data-dir`): its
    /// chain is verified as an export would be, then every row of the store is read with
    /// checksums verified and cross-checked (index rows against datoms, datoms against entries).
    #[arg(long, value_name = "DIR", conflicts_with = "each")]
    pub data_dir: Option<PathBuf>,
    /// Live: verify every endpoint's chain separately and check that their heads agree.
    #[arg(long)]
    pub each: bool,
    /// Offline: list every failure instead of stopping at the first.
    #[arg(long, requires = "offline")]
    pub all: bool,
    /// Offline: a checkpoint saved earlier (`engram audit checkpoint --out FILE`); the chain
    /// must contain it, which exposes a truncated or rewritten history.
    #[arg(long, value_name = "CHECKPOINT", requires = "offline")]
    pub pin: Option<PathBuf>,
    /// Offline: the trusted genesis keys, as hex public keys (repeat or separate with commas);
    /// genesis must list exactly these. Without it (or --pin) the input's own genesis is the
    /// anchor.
    #[arg(
        long = "genesis-key",
        value_name = "HEX",
        value_delimiter = ',',
        requires = "offline"
    )]
    pub genesis_keys: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Keep the nodes' data and logs here instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Concurrent simulated agents.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub agents: u32,
    /// How long the agents write; the leader is killed about 40% of the way in.
    #[arg(long, default_value_t = 20, value_name = "S", value_parser = clap::value_parser!(u64).range(4..=3600))]
    pub duration_secs: u64,
    /// Use ports P, P+1, P+2 instead of free ones chosen by the OS.
    #[arg(long, value_name = "P")]
    pub base_port: Option<u16>,
}

/// `engram jobs`.
#[derive(Args, Debug, Clone)]
pub struct JobsArgs {
    /// Only jobs of this kind: snapshot-build, snapshot-install, redaction-purge, retention,
    /// divergence-check, search-rebuild or backup.
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Jobs listed at most per node.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: u32,
}

/// `engram metrics`.
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Print each node's whole Prometheus text (with `--json`: beside the glance, as `text`).
    #[arg(long)]
    pub raw: bool,
}

/// `engram access`.
#[derive(Args, Debug, Clone)]
pub struct AccessArgs {
    /// Events on this namespace or below it (`team` matches `team` and `team/a`).
    #[arg(long, value_name = "NAMESPACE")]
    pub ns: Option<String>,
    /// Events of this caller only.
    #[arg(long, value_name = "AGENT")]
    pub principal: Option<String>,
    /// Events served at or after this time (ns since the Unix epoch, the node's clock).
    #[arg(long, value_name = "NS", conflicts_with = "last_secs")]
    pub since_ns: Option<i64>,
    /// Events served in the last this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub last_secs: Option<u64>,
    /// Events listed at most per node.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
    /// Only the calls each node refused for want of authentication or permission (every node
    /// records those, whatever namespaces it logs).
    #[arg(long)]
    pub refused: bool,
    /// Read each node's whole log and check it: numbering, links, every signature by the
    /// node's key, and that every event is covered by a signature. Exit code 2 if one does not
    /// verify.
    #[arg(long, conflicts_with_all = ["ns", "principal", "since_ns", "last_secs", "refused", "export", "verify_file"])]
    pub verify: bool,
    /// Write each node's whole log, signed events and the key they are signed with, to FILE
    /// (JSON), for `--verify-file` to check later with no cluster at hand.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ns", "principal", "since_ns", "last_secs", "verify_file"])]
    pub export: Option<std::path::PathBuf>,
    /// Have every node log the reads under PREFIX (`*`: everything, exports included), from
    /// now on: a policy change recorded in the audit chain (needs the `audit` grant).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["ns", "principal", "since_ns", "last_secs", "verify", "export", "verify_file", "disable"])]
    pub enable: Option<String>,
    /// Stop logging the reads under PREFIX (a prefix `--enable` switched on).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["ns", "principal", "since_ns", "last_secs", "verify", "export", "verify_file"])]
    pub disable: Option<String>,
    /// Check an `--export` file offline, as `--verify` checks the live logs.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ns", "principal", "since_ns", "last_secs"])]
    pub verify_file: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every command, with the path of the command that has it.
    fn every_arg(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            out.push((path.to_string(), arg.clone()));
        }
        for sub in cmd.get_subcommands() {
            every_arg(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    /// A flag whose doc names its default in words ("[default: 10]") hides clap's own, so
    /// `--help` never shows two defaults that disagree ("[default: 10] [default: 0]").
    #[test]
    fn no_argument_shows_two_defaults() {
        let mut args = Vec::new();
        every_arg(&Cli::command(), "engram", &mut args);
        let doubled: Vec<String> = args
            .iter()
            .filter(|(_, arg)| {
                let doc = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                doc.contains("[default:")
                    && !arg.get_default_values().is_empty()
                    && !arg.is_hide_default_value_set()
            })
            .map(|(path, arg)| format!("{path} --{}", arg.get_id()))
            .collect();
        assert!(
            doubled.is_empty(),
            "flags whose help shows two defaults: {doubled:?}"
        );
        // The rendered help of `search` says 10 once and nothing else.
        let mut cmd = Cli::command();
        let search = cmd.find_subcommand_mut("search").expect("engram search exists");
        let help = search.render_long_help().to_string();
        assert!(help.contains("[default: 10]"), "{help}");
        assert!(!help.contains("[default: 0]"), "{help}");
    }
}
