// A fault the harness planned but could not inject is judged and reported as such: never as
// "injected, unexercised", and never in silence.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "chaos/oracle.h"
#include "chaos/report.h"

namespace idem::chaos {
namespace {

// Two consumer_replay operations, each applied once and never delivered again: one replay ran
// and found nothing to refuse (unexercised), the other could not be set up at all.
struct TwoReplays {
  std::vector<Operation> plan = {{"op-1-0", 10, FaultMode::kConsumerReplay},
                                 {"op-1-1", 20, FaultMode::kConsumerReplay}};
  std::map<std::string, Evidence> evidence;
  std::vector<HarnessFailure> failures = {
      {"op-1-1", FaultMode::kConsumerReplay, "consumer replay: Connection Closed"},
      {"op-1-1", FaultMode::kConsumerReplay, "consumer replay: a second reason"}};
  TwoReplays() {
    for (const Operation& op : plan) {
      Evidence& e = evidence[op.id];
      e.charges = 1;
      e.applied = 1;
      e.applied_amounts = {op.amount};
    }
  }
  Verdict Judged() const { return Judge(plan, evidence, {FaultMode::kConsumerReplay}, failures); }
};

TEST(ChaosHarnessFailureTest, AFaultNotInjectedIsCountedApartFromUnexercised) {
  const TwoReplays run;
  const Verdict v = run.Judged();
  const ModeResult& row = v.modes.at(FaultMode::kConsumerReplay);
  EXPECT_EQ(row.injected, 1);
  EXPECT_EQ(row.unexercised, 1);
  EXPECT_EQ(row.harness_failed, 1);  // two reasons, one fault
  EXPECT_EQ(v.injected, 1);
  EXPECT_EQ(v.harness_failed, 1);
  EXPECT_EQ(v.escaped + v.lost, 0);
}

// A fault whose injection failed half-way can still have done harm: that is never hidden.
TEST(ChaosHarnessFailureTest, AFailedInjectionThatEscapedStillCountsAsEscaped) {
  TwoReplays run;
  run.evidence["op-1-1"].applied = 2;
  run.evidence["op-1-1"].applied_amounts = {20, 20};
  const Verdict v = run.Judged();
  const ModeResult& row = v.modes.at(FaultMode::kConsumerReplay);
  EXPECT_EQ(row.injected, 2);
  EXPECT_EQ(row.escaped, 1);
  EXPECT_EQ(row.harness_failed, 1);
  EXPECT_EQ(v.escaped, 1);
}

// relay_kill is judged per republished event; a crash that never happened leaves none, so
// before the harness said so the row just showed fewer injections.
TEST(ChaosHarnessFailureTest, ARelayThatDidNotCrashShowsInItsRow) {
  const std::vector<Operation> plan = {{"op-1-0", 10, FaultMode::kRelayKill}};
  std::map<std::string, Evidence> evidence;
  evidence["op-1-0"].charges = 1;
  evidence["op-1-0"].applied = 1;
  evidence["op-1-0"].applied_amounts = {10};
  const Verdict v = Judge(plan, evidence, {FaultMode::kRelayKill},
                          {{"op-1-0", FaultMode::kRelayKill, "did not crash"}});
  EXPECT_EQ(v.modes.at(FaultMode::kRelayKill).injected, 0);
  EXPECT_EQ(v.modes.at(FaultMode::kRelayKill).harness_failed, 1);
  EXPECT_EQ(v.harness_failed, 1);
}

TEST(ChaosHarnessFailureTest, TheTableShowsTheFailedFaultItsReasonAndTheVerdict) {
  const TwoReplays run;
  RunFacts facts;
  facts.harness_errors = {"op-1-1 consumer_replay: consumer replay: Connection Closed"};
  facts.problems = {"op-1-5 (send): 0 connection refused"};
  facts.nats_admin_replaced = 2;
  ChaosOptions options;
  std::ostringstream out;
  PrintTable(options, run.Judged(), facts, out);
  const std::string table = out.str();
  EXPECT_NE(table.find("harness failed\n"), std::string::npos) << table;
  EXPECT_NE(table.find("consumer_replay            1        0        0        0            1"
                       "        0      0               1\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("harness: op-1-1 consumer_replay: consumer replay: Connection Closed\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("client: op-1-5 (send)"), std::string::npos) << table;
  EXPECT_NE(table.find("harness: its NATS connection was found closed and replaced 2 times\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("verdict: exactly once for the faults injected, but the harness failed "
                       "to inject 1 planned fault"),
            std::string::npos)
      << table;
}

TEST(ChaosHarnessFailureTest, TheJsonCarriesTheFailuresApartFromTheClientsProblems) {
  const TwoReplays run;
  RunFacts facts;
  facts.harness_errors = {"op-1-1 consumer_replay: consumer replay: Connection Closed"};
  facts.nats_admin_replaced = 1;
  ChaosOptions options;
  std::ostringstream out;
  PrintJson(options, run.Judged(), facts, out);
  const auto doc = nlohmann::json::parse(out.str());
  EXPECT_EQ(doc["harness_failed"], 1);
  EXPECT_EQ(doc["harness_errors"].size(), 1u);
  EXPECT_TRUE(doc["problems"].empty());
  EXPECT_EQ(doc["harness_connections_replaced"], 1);
  EXPECT_EQ(doc["modes"][0]["harness_failed"], 1);
  EXPECT_EQ(doc["modes"][0]["injected"], 1);
  EXPECT_EQ(doc["modes"][0]["unexercised"], 1);
}

}  // namespace
}  // namespace idem::chaos
