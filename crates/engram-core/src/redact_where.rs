//! Redaction by predicate (`docs/FORGETTING.md`, "Redaction by predicate and retention").
//!
//! A [`RedactWhere`] can match any number of datoms, so it is applied in **ranges**
//! ([`RedactRange`]), each its own log entry. The leader plans each range off the apply path
//! ([`plan_range`]): it scans the namespace's index from where the last range ended, at most
//! [`RedactRange::MAX_ROWS`] rows, for the next matching datoms, and proposes the key range
//! from the first to the last it found. Every replica evaluates the predicate again over that
//! range only ([`range_targets`]), so what an entry takes is a pure function of (state, entry),
//! and an entry reads at most `MAX_ROWS` rows whatever the namespace holds. A predicate naming
//! an attribute is scanned by the attribute's AEVT rows (keys only; each candidate's datom is
//! then read from its EAVT row), any other by the namespace's EAVT rows. An entry that reaches
//! branches (every one a leader of this build proposes, but a versions policy's) then scans
//! the datom rows of every branch of the namespace, grouping each branch datom with its
//! branch's own datoms of the slot.
//!
//! What each range takes is written like a part of an entity's redaction (`crate::redact`): a
//! record transaction in the system namespace listing the datoms packed, then their rows in
//! redacted form. The first range's record names the predicate (its value condition only as
//! "a value was given": the value is what is being forgotten); later ranges name the first.
//!
//! A versions policy's ranges (`engram_core::policy::VersionsRow`) add one condition per
//! datom: [`superseded`], decided from the slot's later rows, with bounded reads per datom and
//! per range.
//!
//! Must not depend on: the engine (it applies what this plans), the server or the network.

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::redact::{RECORD_NAMESPACE, RECORD_PART_OF, RECORD_REASON, RedactedRef};
use engram_types::redact_where::{
    RECORD_RETENTION_KEEP_MS, RECORD_RETENTION_KEEP_VERSIONS, RECORD_SESSION_ENDED, RECORD_WHERE_AGENT,
    RECORD_WHERE_ATTRIBUTE, RECORD_WHERE_BEFORE_TX, RECORD_WHERE_VALID_FROM_BEFORE, RECORD_WHERE_VALUE_GIVEN,
    RECORD_WHERE_WRITTEN_BEFORE,
};
use engram_types::{RedactRange, RedactWhere, RetentionRule, TxId, TxRequest, Value};

use crate::redact::Target;
use crate::value_groups::{Unread, in_key_order};
use crate::{CoreError, Rejection, keys};

/// What the leader found for the next range of a redaction by predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Propose this range: it holds `datoms` matching datoms.
    Range { range: RedactRange, datoms: usize },
    /// Nothing matched in the rows read, and more rows follow: plan again after `after`.
    Skip { after: Vec<u8> },
    /// Nothing is left to take.
    Done,
}

/// The next range of `req` after the index key `after` (`None`: from the start), with at most
/// `limit` datoms, reading at most `budget_rows` rows (at most [`RedactRange::MAX_ROWS`]).
/// `first_tx`: the first range's transaction, once there is one. `keep_versions`: only datoms
/// a versions policy keeping that many no longer keeps ([`superseded`]). Under
/// [`Groups::WholeIfAllMatch`] a datom counts only if its whole group matches, as at apply.
#[allow(clippy::too_many_arguments)]
pub fn plan_range(
    view: &dyn ReadView,
    req: &RedactWhere,
    keep_versions: Option<u32>,
    groups: Groups,
    first_tx: Option<TxId>,
    after: Option<&[u8]>,
    limit: u32,
    budget_rows: usize,
    branches: bool,
) -> Result<Plan, CoreError> {
    let range = RedactRange {
        first_tx,
        from_key: Vec::new(),
        through_key: Vec::new(),
        limit,
    };
    let limit = range.applied_limit();
    let budget_rows = budget_rows.clamp(1, RedactRange::MAX_ROWS);
    let prefixes = scan_prefixes(req, branches, keep_versions);
    // The index `after` is in, and where to go on from in it; from the first index's start for
    // no cursor or one outside every index.
    let (at, from) = match after.and_then(|a| Some((prefixes.iter().position(|p| a.starts_with(p))?, a))) {
        Some((at, after)) => (at, successor(after)),
        None => (0, prefixes[0].clone()),
    };
    let end = prefix_end(&prefixes[at]);
    let mut matcher = Matcher::new(view, req, keep_versions, groups, first_tx)?;
    let rows = view.scan(Space::State, &from, end.as_deref(), budget_rows)?;
    let read_all = rows.len() < budget_rows;
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut last = None;
    let mut rows = rows.into_iter();
    let mut stopped = false;
    for (key, value) in rows.by_ref() {
        match matcher.taken_with(view, &key, &value)? {
            Taken::Stop => {
                stopped = true;
                break;
            }
            Taken::Yes(_) => {
                found.push(key.clone());
                if found.len() == limit {
                    last = Some(key);
                    break;
                }
            }
            Taken::No => {}
        }
        last = Some(key);
    }
    if crate::planted::active(crate::planted::PlantedBug::RedactionRangeOverrunsItsLimit) {
        for (key, value) in rows {
            if let Taken::Yes(_) = matcher.taken_with(view, &key, &value)? {
                found.push(key);
                break;
            }
        }
    }
    match (found.first(), found.last()) {
        (Some(first), Some(through)) => Ok(Plan::Range {
            datoms: found.len(),
            range: RedactRange {
                from_key: first.clone(),
                through_key: through.clone(),
                ..range
            },
        }),
        // Stopped before anything matched: the next plan starts at the row it stopped at,
        // with the entry's reading of slots fresh.
        _ => match (read_all && !stopped, last) {
            (false, Some(after)) => Ok(Plan::Skip { after }),
            // This index is read to its end: the next one, from its start (no row's key is
            // a prefix itself).
            _ => match prefixes.get(at + 1) {
                Some(next) => Ok(Plan::Skip { after: next.clone() }),
                None => Ok(Plan::Done),
            },
        },
    }
}

/// What `range` of `req` takes at apply: the datoms the predicate matches among the index rows
/// from its `from_key` through its `through_key`, at most its applied limit, reading at most
/// [`RedactRange::MAX_ROWS`] rows, and with them their groups as `groups` says (in key order).
/// A range outside the predicate's index, or reversed, is refused; one where nothing matches
/// any more (taken meanwhile) is answered [`Rejection::NothingToRedact`].
pub fn range_targets(
    view: &dyn ReadView,
    req: &RedactWhere,
    keep_versions: Option<u32>,
    groups: Groups,
    range: &RedactRange,
    branches: bool,
) -> Result<Result<Vec<Target>, Rejection>, CoreError> {
    let within_one = scan_prefixes(req, branches, keep_versions)
        .iter()
        .any(|p| range.from_key.starts_with(p) && range.through_key.starts_with(p));
    if !within_one || range.from_key > range.through_key {
        return Ok(Err(Rejection::NothingToRedact(
            "the range is not one of the predicate's index".into(),
        )));
    }
    let mut matcher = Matcher::new(view, req, keep_versions, groups, range.first_tx)?;
    let end = successor(&range.through_key);
    let rows = view.scan(Space::State, &range.from_key, Some(&end), RedactRange::MAX_ROWS)?;
    let limit = range.applied_limit();
    let mut matched = 0;
    let mut out: Vec<Target> = Vec::new();
    for (key, value) in rows {
        match matcher.taken_with(view, &key, &value)? {
            Taken::Yes(taken) => {
                out.extend(taken);
                matched += 1;
                if matched == limit {
                    break;
                }
            }
            Taken::Stop => break,
            Taken::No => {}
        }
    }
    let out = match groups {
        Groups::Whole => match matcher.grouper.close(view, out)? {
            Ok(out) => out,
            Err(rejection) => return Ok(Err(rejection)),
        },
        // Each group whole already; groups of two matches may be one.
        Groups::WholeIfAllMatch => in_key_order(out),
        Groups::Split => out,
    };
    if out.is_empty() {
        return Ok(Err(Rejection::NothingToRedact(format!(
            "nothing in namespace {} matching the predicate is left to redact in this range",
            req.namespace
        ))));
    }
    Ok(Ok(out))
}

/// The record transaction of one range. `retention`: the rule of the retention policy that
/// made it, if one did.
pub fn record(
    req: &RedactWhere,
    targets: &[Target],
    part_of: Option<TxId>,
    retention: Option<RetentionRule>,
) -> TxRequest {
    let assert = crate::redact::record_op;
    let mut ops = vec![
        assert(RECORD_NAMESPACE, Value::String(req.namespace.to_string())),
        assert(RECORD_REASON, Value::String(req.reason.clone())),
    ];
    match part_of {
        // Transaction ids are log indexes, far below 2^63.
        Some(first) => ops.push(assert(RECORD_PART_OF, Value::I64(first.0 as i64))),
        None => {
            let p = &req.predicate;
            if let Some(a) = &p.attribute {
                ops.push(assert(RECORD_WHERE_ATTRIBUTE, Value::Keyword(a.to_string())));
            }
            if let Some(agent) = &p.agent {
                ops.push(assert(RECORD_WHERE_AGENT, Value::String(agent.clone())));
            }
            if p.value.is_some() {
                // Not the value, nor a plain hash of it (a guess could be tested against it).
                ops.push(assert(RECORD_WHERE_VALUE_GIVEN, Value::Bool(true)));
            }
            if let Some(tx) = p.before_tx {
                ops.push(assert(RECORD_WHERE_BEFORE_TX, Value::I64(tx.0 as i64)));
            }
            if let Some(t) = p.written_before_ns {
                ops.push(assert(RECORD_WHERE_WRITTEN_BEFORE, Value::Instant(t)));
            }
            if let Some(t) = p.valid_from_before_ns {
                ops.push(assert(RECORD_WHERE_VALID_FROM_BEFORE, Value::Instant(t)));
            }
            match retention {
                Some(RetentionRule::KeepMs(keep_ms)) => {
                    let keep_ms = i64::try_from(keep_ms).unwrap_or(i64::MAX);
                    ops.push(assert(RECORD_RETENTION_KEEP_MS, Value::I64(keep_ms)));
                }
                Some(RetentionRule::KeepVersions(n)) => {
                    ops.push(assert(RECORD_RETENTION_KEEP_VERSIONS, Value::I64(i64::from(n))));
                }
                Some(RetentionRule::SessionEnded) => {
                    ops.push(assert(RECORD_SESSION_ENDED, Value::Bool(true)));
                }
                None => {}
            }
        }
    }
    let refs: Vec<RedactedRef> = targets.iter().map(Target::listed).collect();
    for packed in RedactedRef::pack(&refs) {
        ops.push(assert(engram_types::redact::RECORD_DATOMS, Value::Bytes(packed)));
    }
    crate::redact::record_tx(ops, &req.provenance)
}

/// The indexes a predicate is scanned by, in order: the attribute's AEVT rows when it names
/// one, else the namespace's EAVT rows; then, for an entry that reaches branches, the datom
/// rows of every branch of the namespace (a branch has no AEVT rows: the predicate's
/// attribute is checked on each datom). A versions policy keeps to main: which versions of a
/// branch's slot it would keep is not defined.
fn scan_prefixes(req: &RedactWhere, branches: bool, keep_versions: Option<u32>) -> Vec<Vec<u8>> {
    let mut out = vec![match &req.predicate.attribute {
        Some(a) => keys::aevt_attr(&req.namespace, a),
        None => keys::eavt_namespace(&req.namespace),
    }];
    let branches = branches && !crate::planted::active(crate::planted::PlantedBug::RedactionSkipsBranches);
    if branches && keep_versions.is_none() {
        out.push(keys::branch_eavt_namespace(&req.namespace));
    }
    out
}

/// The smallest key after `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    [key, &[0]].concat()
}

/// Datoms are taken only below this transaction (`None`: no bound): the least of the
/// predicate's `before_tx`, the transaction after the last one written before its
/// `written_before_ns`, and the first range's transaction.
fn tx_bound(
    view: &dyn ReadView,
    req: &RedactWhere,
    first_tx: Option<TxId>,
) -> Result<Option<TxId>, CoreError> {
    let written = match req.predicate.written_before_ns {
        None => None,
        Some(at) => Some(match crate::reads::tx_at_time(view, at.saturating_sub(1))? {
            Some((tx, _)) => TxId(tx.0.saturating_add(1)),
            // Nothing was written before that instant.
            None => TxId(0),
        }),
    };
    Ok([req.predicate.before_tx, written, first_tx]
        .into_iter()
        .flatten()
        .min())
}

/// How a range treats the groups of the datoms it matches (`crate::value_groups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Groups {
    /// Each matching datom alone: entries proposed before values went out of a slot whole,
    /// applied as they were.
    Split,
    /// A redaction asked for: every datom of a matching datom's group goes with it, matching
    /// or not (a retraction left holding the value would still disclose it).
    Whole,
    /// A retention policy's: a group goes only when every datom of it matches (is past the
    /// policy), else none of it does.
    WholeIfAllMatch,
}

/// The predicate of one range being planned or applied, with what deciding it needs.
struct Matcher<'r> {
    req: &'r RedactWhere,
    /// Datoms are taken only below this transaction ([`tx_bound`]).
    bound: Option<TxId>,
    versions: Versions,
    groups: Groups,
    grouper: crate::value_groups::Grouper,
}

impl<'r> Matcher<'r> {
    fn new(
        view: &dyn ReadView,
        req: &'r RedactWhere,
        keep_versions: Option<u32>,
        groups: Groups,
        first_tx: Option<TxId>,
    ) -> Result<Matcher<'r>, CoreError> {
        Ok(Matcher {
            req,
            bound: tx_bound(view, req, first_tx)?,
            versions: Versions::new(keep_versions, groups != Groups::Split),
            groups,
            grouper: crate::value_groups::Grouper::new(&req.namespace),
        })
    }

    /// What the index row `key` (under the predicate's prefix) brings into the range, if the
    /// predicate takes its datom: the datom, and under [`Groups::WholeIfAllMatch`] its whole
    /// group (nothing if any datom of the group does not match or its slot is too large to
    /// group; [`Taken::Stop`] if the entry's reading of slots is spent: the range ends there).
    fn taken_with(&mut self, view: &dyn ReadView, key: &[u8], value: &[u8]) -> Result<Taken, CoreError> {
        let Some(target) = self.candidate(view, key, value)? else {
            return Ok(Taken::No);
        };
        if self.groups != Groups::WholeIfAllMatch {
            return Ok(Taken::Yes(vec![target]));
        }
        let group: Vec<Target> = match self.grouper.slot(view, &target.datom)? {
            Err(Unread::TooLarge) => return Ok(Taken::No),
            Err(Unread::OverBudget) => return Ok(Taken::Stop),
            Ok(slot) => slot.group_of(&target.key).into_iter().cloned().collect(),
        };
        for member in &group {
            if member.key != target.key && !self.matches(view, &member.datom)? {
                return Ok(Taken::No);
            }
        }
        Ok(Taken::Yes(group))
    }

    /// The datom an index row under the predicate's prefix names, as a target, if the
    /// predicate takes it: its value still there, and [`Self::matches`].
    fn candidate(
        &mut self,
        view: &dyn ReadView,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Target>, CoreError> {
        let req = self.req;
        // An attribute's AEVT key names its datom's EAVT row; any other row the scan passes
        // (main's EAVT, a branch's datoms whatever the predicate names) is the datom itself.
        let target = match &req.predicate.attribute {
            Some(a) if key.first() != Some(&keys::BRANCH_EAVT) => {
                let (entity, tx, seq) = keys::trailing_entity_tx_seq(key).ok_or_else(|| {
                    CoreError::corrupt(
                        format!("index key {}", crate::rows::hex(key)),
                        "no entity, tx and seq",
                    )
                })?;
                // A cheap test first: most rows a time-bounded scan passes over are too new.
                if self.bound.is_some_and(|b| tx >= b) {
                    return Ok(None);
                }
                let eavt = keys::eavt(&req.namespace, entity, a, tx, seq);
                let row = view.get(Space::State, &eavt)?.ok_or_else(|| {
                    CoreError::corrupt(
                        format!("index key {}", crate::rows::hex(key)),
                        "its datom row is missing",
                    )
                })?;
                crate::redact::unredacted(eavt, &row)?
            }
            _ => crate::redact::unredacted(key.to_vec(), value)?,
        };
        match target {
            Some(t) if self.matches(view, &t.datom)? => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    /// Whether the predicate takes datom `d` (its value still there): below the bound,
    /// matching, and under a versions policy no longer kept by it.
    fn matches(&mut self, view: &dyn ReadView, d: &engram_types::Datom) -> Result<bool, CoreError> {
        if self.bound.is_some_and(|b| d.tx >= b) || !self.req.predicate.matches(d) {
            return Ok(false);
        }
        Ok(!self.versions.keeps(view, &self.req.namespace, d)?)
    }
}

/// What one index row brings into a range.
enum Taken {
    No,
    Yes(Vec<Target>),
    /// The range ends before this row.
    Stop,
}

/// A versions policy's condition while one range is planned or evaluated: the versions it
/// keeps, and how many more of the slots' later rows [`superseded`] may read for it.
struct Versions {
    keep: Option<u32>,
    /// Whether a later assertion under cardinality one ends a claim only when its agent's
    /// ([`superseded`]'s `fold_rule`).
    fold_rule: bool,
    rows_left: usize,
    /// Each attribute's cardinality as declared now, read once per range: a range's datoms
    /// are mostly of one or a few attributes.
    cardinalities: std::collections::BTreeMap<engram_types::Attribute, engram_types::Cardinality>,
}

impl Versions {
    fn new(keep: Option<u32>, fold_rule: bool) -> Versions {
        Versions {
            keep,
            fold_rule,
            rows_left: VERSIONS_RANGE_ROWS,
            cardinalities: Default::default(),
        }
    }

    /// Whether the versions policy (if any) still keeps `d`.
    fn keeps(
        &mut self,
        view: &dyn ReadView,
        ns: &engram_types::Namespace,
        d: &engram_types::Datom,
    ) -> Result<bool, CoreError> {
        let Some(keep) = self.keep else {
            return Ok(false);
        };
        let cardinality = match self.cardinalities.get(&d.attribute) {
            Some(c) => *c,
            None => {
                let c = crate::schema::def_at(view, ns, &d.attribute, None)?
                    .map_or(engram_types::Cardinality::One, |def| def.cardinality);
                self.cardinalities.insert(d.attribute.clone(), c);
                c
            }
        };
        Ok(!superseded(
            view,
            ns,
            d,
            cardinality,
            keep,
            self.fold_rule,
            &mut self.rows_left,
        )?)
    }
}

/// Most later rows of a slot read to decide one datom under a versions policy.
pub const VERSIONS_READ_ROWS: usize = 1_000;

/// Most later rows read for all the datoms of one range together: a range's cost stays bounded
/// however its slots are shaped (ten thousand live values of one many-valued slot would
/// otherwise read each other's rows ten thousand times over).
pub const VERSIONS_RANGE_ROWS: usize = 100_000;

/// Whether a versions policy keeping `keep` versions no longer keeps `d`: at least `keep`
/// later transactions wrote its slot, and `d` is not a live claim (a retraction, or an
/// assertion a later datom of the slot ended, as the current-claims fold has it: under
/// cardinality many, a later datom of its value; under cardinality one, a later retraction of
/// its value or a later assertion by its agent; `cardinality` is the attribute's as
/// declared). Without `fold_rule` (entries proposed before values went out of a slot whole,
/// applied as they were), under cardinality one any later datom of its value ends it too,
/// which took a claim another agent's equal assertion had not ended. Reads the slot's datoms
/// after `d`, at most [`VERSIONS_READ_ROWS`] and at most `rows_left` (which it lowers by what
/// it read); a datom not decided within them is kept. Every replica reads the same rows in the
/// same order and stops at the same one, so the answer is a pure function of the state.
pub fn superseded(
    view: &dyn ReadView,
    ns: &engram_types::Namespace,
    d: &engram_types::Datom,
    cardinality: engram_types::Cardinality,
    keep: u32,
    fold_rule: bool,
    rows_left: &mut usize,
) -> Result<bool, CoreError> {
    if keep == 0 {
        return Ok(false);
    }
    let slot = keys::eavt_attr(ns, d.entity, &d.attribute);
    let end = prefix_end(&slot);
    let mut from = successor(&keys::eavt(ns, d.entity, &d.attribute, d.tx, u32::MAX));
    let mut later_txs = 0u32;
    let mut last_tx = d.tx;
    let mut ended = d.op == engram_types::Op::Retract
        || crate::planted::active(crate::planted::PlantedBug::RetentionTakesLiveClaims);
    let mut read = 0usize;
    let most = VERSIONS_READ_ROWS.min(*rows_left);
    while read < most {
        let step = (most - read).min(256);
        let rows = view.scan(Space::State, &from, end.as_deref(), step)?;
        let full = rows.len() == step;
        *rows_left -= rows.len();
        for (key, value) in &rows {
            read += 1;
            let (tx, _) = keys::trailing_tx_seq(key).ok_or_else(|| {
                CoreError::corrupt(format!("datom row {}", crate::rows::hex(key)), "no tx and seq")
            })?;
            if tx != last_tx {
                later_txs += 1;
                last_tx = tx;
            }
            if !ended {
                let later = engram_types::Datom::decode(value)
                    .map_err(|e| CoreError::corrupt(format!("datom row {}", crate::rows::hex(key)), e))?;
                let one = cardinality == engram_types::Cardinality::One;
                let same_value =
                    later.value == d.value && (!one || !fold_rule || later.op == engram_types::Op::Retract);
                ended = same_value
                    || (one
                        && later.op == engram_types::Op::Assert
                        && later.provenance.agent == d.provenance.agent);
            }
            if later_txs >= keep && ended {
                return Ok(true);
            }
        }
        match rows.last() {
            Some((key, _)) if full => from = successor(key),
            _ => break,
        }
    }
    Ok(false)
}

/// The datoms a redaction by predicate would take, for a dry run (with their groups, as the
/// redaction takes them): at most `max` of them, and how many in all.
pub fn preview(view: &dyn ReadView, req: &RedactWhere, max: usize) -> Result<(Vec<Target>, u64), CoreError> {
    let mut after: Option<Vec<u8>> = None;
    let mut listed = Vec::new();
    let mut count = 0u64;
    let mut counted = std::collections::HashSet::new();
    loop {
        match plan_range(
            view,
            req,
            None,
            Groups::Whole,
            None,
            after.as_deref(),
            PREVIEW_STEP,
            RedactRange::MAX_ROWS,
            true,
        )? {
            Plan::Done => break,
            Plan::Skip { after: next } => after = Some(next),
            Plan::Range { range, datoms } => {
                match range_targets(view, req, None, Groups::Whole, &range, true)? {
                    Ok(targets) => {
                        // A group reaching past the range is met again by a later range.
                        for t in targets {
                            if counted.insert(t.key.clone()) {
                                count += 1;
                                if listed.len() < max {
                                    listed.push(t);
                                }
                            }
                        }
                    }
                    // A slot too large to group: the redaction itself will say so.
                    Err(_) => count += datoms as u64,
                }
                after = Some(range.through_key);
            }
        }
    }
    Ok((listed, count))
}

/// Datoms a dry run counts per planned range.
const PREVIEW_STEP: u32 = engram_types::RedactPart::MAX_DATOMS;
