//! Product bugs the simulation found, each pinned: the seeds that found them (they replay the
//! same run as long as the harness draws the same way), plus a targeted scenario that provokes
//! the same situation directly, so the regression stays covered when the draws change.

#![cfg(madsim)]

use std::time::Duration;

use engram_sim_tests::cluster::{Cluster, NodeSettings};
use engram_sim_tests::{Options, run_seed};

fn assert_seeds_pass(seeds: &[u64]) {
    for seed in seeds {
        let r = run_seed(*seed, &Options::default());
        assert!(r.passed(), "{}", r.failure_text());
    }
}

/// Four nodes booted, 1–3 initialised as voters, node 4 outside the configuration.
async fn four_nodes_three_voters(seed: u64) -> Cluster {
    let settings = NodeSettings {
        snapshot_every_entries: 1000,
        ..NodeSettings::default()
    };
    let cluster = Cluster::boot(
        madsim::runtime::Handle::current(),
        4,
        &settings,
        &[0; 4],
        seed,
        None,
    );
    madsim::time::sleep(Duration::from_millis(200)).await;
    cluster.init(&[1, 2, 3]).await.expect("init");
    madsim::time::sleep(Duration::from_secs(1)).await;
    cluster
}

/// Seeds 1, 105 and 110 of the first 256-seed sweep: the membership fault asked the leader to
/// remove itself. `RaftNode::remove_node` made two changes — remove the voter, then remove the
/// node — and the second reached a leader that was no longer a voter; openraft
/// 0.10.0-alpha.37 panicked ("Only leader is allowed to call update_effective_membership()")
/// and took the node down. Fixed by removing a voter in one change and refusing membership
/// changes on a node that is not a voting leader.
#[test]
fn seeds_that_found_the_self_removal_panic() {
    assert_seeds_pass(&[1, 105, 110]);
}

#[test]
fn the_leader_can_remove_itself_and_the_cluster_keeps_serving() {
    let rt = madsim::runtime::Runtime::with_seed_and_config(7, madsim::Config::default());
    rt.block_on(async {
        let cluster = four_nodes_three_voters(7).await;
        cluster
            .control(cluster.add_node_call(1, 4, false))
            .await
            .expect("add node 4 as a voter");
        let leader = cluster.leader_status().await.expect("a leader").node_id;

        // The leader removes itself, then is asked again: the second request must be refused
        // (or forwarded), not crash the node.
        cluster
            .control(cluster.remove_node_call(leader, leader))
            .await
            .expect("the leader removes itself");
        let again = cluster.control(cluster.remove_node_call(leader, leader)).await;
        println!("second removal through the old leader: {again:?}");

        madsim::time::sleep(Duration::from_secs(2)).await;
        let status = cluster.leader_status().await.expect("a new leader");
        assert_ne!(status.node_id, leader, "the removed node is not the leader");
        assert!(
            status.members.iter().all(|m| m.id != leader),
            "the removed node left the configuration: {:?}",
            status.members
        );
        let via = status.node_id;
        let registers = cluster
            .control(engram_sim_tests::workload::create_registers(
                vec![engram_sim_tests::cluster::node_addr(via)],
                1,
            ))
            .await
            .expect("the cluster still commits writes");
        assert_eq!(registers.len(), 1);
        // The old leader is still running (it was removed, not killed).
        assert!(
            cluster.status(leader).await.is_ok(),
            "the removed node did not crash"
        );
    });
}

/// Seeds 1141 and 1350 of the first soak (seeds 1000..): a node was being added, received
/// and applied committed entries — attesting them with its own key — and then the entry that
/// would have admitted it never committed. Its copy of the chain held attestations by a key no
/// membership entry admits, and `Audit.Entries` on it streamed them and then failed with
/// DATA_LOSS: an honest node looked tampered with. Fixed: such a node refuses with
/// FAILED_PRECONDITION and says to read the chain from a member.
#[test]
fn seeds_that_found_the_unadmitted_replica() {
    assert_seeds_pass(&[1141, 1350]);
}

/// The scenario of seeds 1141 and 1350, replayed since keys are admitted by key-change entries:
/// `AddNode` now commits the key change admitting node 4 *before* node 4 joins, so with the
/// leader cut off nothing reaches node 4 at all — the unadmitted replica can no longer arise
/// through `AddNode`. (The refusal above stays as defence in depth: a node holding a chain that
/// does not admit it still answers FAILED_PRECONDITION.)
#[test]
fn a_node_is_admitted_by_the_chain_before_it_receives_any_entry() {
    let rt = madsim::runtime::Runtime::with_seed_and_config(11, madsim::Config::default());
    rt.block_on(async {
        let cluster = four_nodes_three_voters(11).await;
        let leader = cluster.leader_status().await.expect("a leader").node_id;
        cluster
            .control(engram_sim_tests::workload::create_registers(
                vec![engram_sim_tests::cluster::node_addr(leader)],
                3,
            ))
            .await
            .expect("a committed transaction");

        // Cut the leader off from the other voters (not from node 4), then ask it to add
        // node 4: node 4 receives the committed entries, the entry admitting it cannot commit.
        let net = madsim::net::NetSim::current();
        let voters: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
        for v in &voters {
            net.clog_link(cluster.node(leader).madsim_id(), cluster.node(*v).madsim_id());
            net.clog_link(cluster.node(*v).madsim_id(), cluster.node(leader).madsim_id());
        }
        let add = cluster.spawn_control(cluster.add_node_call(leader, 4, true));
        madsim::time::sleep(Duration::from_secs(3)).await;
        for v in &voters {
            net.unclog_link(cluster.node(leader).madsim_id(), cluster.node(*v).madsim_id());
            net.unclog_link(cluster.node(*v).madsim_id(), cluster.node(leader).madsim_id());
        }
        let added = add.await.expect("the add task");
        println!("adding node 4 while the leader was cut off: {added:?}");
        madsim::time::sleep(Duration::from_secs(3)).await;

        let store = &*cluster.node(4).store;
        let head = engram_core::reads::head(store).expect("node 4's head");
        let admitted =
            engram_core::reads::signer_admitted(store, cluster.node(4).key.public().key_id()).expect("K row");
        assert!(
            added.is_err() && !admitted,
            "the admission could not commit while the leader was cut off (the scenario did what it meant to)"
        );
        assert_eq!(
            head.index, 0,
            "node 4 received no entry before its key was admitted"
        );

        let target = engram_sim_tests::cluster::node_addr(4);
        let answer = cluster
            .control(async move {
                let mut client = engram_proto::pb::audit_client::AuditClient::new(
                    engram_sim_tests::cluster::channel(&target),
                );
                match client
                    .entries(engram_proto::pb::EntriesRequest {
                        from_index: 1,
                        limit: 0,
                    })
                    .await
                {
                    Err(s) => Err(s.code()),
                    Ok(resp) => {
                        let mut stream = resp.into_inner();
                        while let Some(item) = futures::StreamExt::next(&mut stream).await {
                            if let Err(s) = item {
                                return Err(s.code());
                            }
                        }
                        Ok(())
                    }
                }
            })
            .await;
        assert_eq!(answer, Ok(()), "an empty chain streams nothing, and no error");
    });
}

/// Seed 826 of the third soak (seeds 768..): node 4 was being added; while it was outside any
/// membership the leader of the moment reached it first, and by peer-auth rule 3 it bound that
/// sender's key alone. Leadership moved to node 1 before node 4 appended its first entry, and
/// node 4 refused node 1 for the rest of the run (it never joined: liveness, I2, I3, I5 failed
/// on it). Fixed: every Raft request lists the keys the sender's chain trusts
/// (`PeerAuth.members`, covered by its signature), and a node outside any membership binds the
/// first sender together with those members.
#[test]
fn seed_that_found_the_stranded_joining_node() {
    assert_seeds_pass(&[826]);
}

/// Seed 3971 of a fresh-seed soak (seeds 3000..): node 3 fell behind (partitioned, then a
/// whole-cluster restart) before node 5 was admitted; node 5 then led, the admitting leader
/// was removed, and node 3, whose applied chain and log both ended before node 5's admission,
/// refused every append and snapshot from node 5 for the rest of the run (liveness, I2, I3, I5
/// failed on it). Fixed by peer-auth rule 4: a request carries the key changes that admitted
/// its signing key, back to a genesis key (`PeerAuth.admissions`), checked against the
/// receiver's own chain — on appends, votes and snapshot streams alike (the first attempt
/// left them off snapshot headers, and the seed still failed on `InstallSnapshot`).
#[test]
fn seed_that_found_the_lagging_member() {
    assert_seeds_pass(&[3971]);
}

/// Seed 4275 of a fresh-seed soak (seeds 4200..): the leader, node 1, removed itself; once it
/// had appended the configuration without itself (not yet committed), peer-auth rule 3 took it
/// for a node outside any cluster and trusted its first contact, which was the Byzantine
/// client: a forged append at term 1145 "from node 3" was accepted and tripped openraft's
/// assertion that a committed entry is never contradicted. Fixed: a node is outside only if
/// neither the membership it appended last nor the last committed one includes it.
#[test]
fn seed_that_found_the_self_removing_leader_trusting_a_forger() {
    assert_seeds_pass(&[4275]);
}
