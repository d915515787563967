#include "rm/fleet_changes.h"

#include "gtest/gtest.h"

namespace switchyard::rm {
namespace {

Fleet FleetOf(int slices, uint64_t version) {
  Fleet fleet;
  fleet.set_version(version);
  (*fleet.mutable_tenant_shares())["a"] = 2;
  for (int s = 0; s < slices; ++s) {
    SliceStatus* slice = fleet.add_slices();
    slice->set_slice_index(s);
    slice->set_healthy(true);
    HostStatus* host = slice->add_hosts();
    host->set_slice_index(s);
    host->set_healthy(true);
    host->set_address("unix:/w" + std::to_string(s));
    host->set_last_heartbeat_age_ms(s);
  }
  return fleet;
}

TEST(FleetChangesTest, SendsTheWholeFleetFirstThenOnlyWhatChanged) {
  FleetChanges changes;
  Fleet first = changes.Next(FleetOf(3, 1));
  EXPECT_EQ(first.slices_size(), 3);
  EXPECT_EQ(first.version(), 1u);

  Fleet now = FleetOf(3, 2);
  now.mutable_slices(1)->set_healthy(false);
  now.mutable_slices(1)->mutable_hosts(0)->set_healthy(false);
  Fleet second = changes.Next(now);
  ASSERT_EQ(second.slices_size(), 1);
  EXPECT_EQ(second.slices(0).slice_index(), 1);
  EXPECT_FALSE(second.slices(0).hosts(0).healthy());
  EXPECT_EQ(second.version(), 2u);
  EXPECT_EQ(second.tenant_shares().at("a"), 2);  // always: they are small

  // A new slice joins; nothing else changed.
  Fleet grown = FleetOf(4, 3);
  grown.mutable_slices(1)->set_healthy(false);
  grown.mutable_slices(1)->mutable_hosts(0)->set_healthy(false);
  Fleet third = changes.Next(grown);
  ASSERT_EQ(third.slices_size(), 1);
  EXPECT_EQ(third.slices(0).slice_index(), 3);
}

TEST(FleetChangesTest, FiguresThatChangeOnTheirOwnAreNoChange) {
  FleetChanges changes;
  (void)changes.Next(FleetOf(2, 1));
  Fleet aged = FleetOf(2, 2);
  for (SliceStatus& slice : *aged.mutable_slices()) {
    HostStatus* host = slice.mutable_hosts(0);
    host->set_last_heartbeat_age_ms(999);
    host->set_last_restart_age_ms(5);
    host->set_resident_bytes(1 << 20);
    host->set_buffer_bytes(7);
  }
  EXPECT_EQ(changes.Next(aged).slices_size(), 0);
}

}  // namespace
}  // namespace switchyard::rm
