#include "worker/fair_share.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/limits.h"

namespace switchyard::worker {
namespace {

// How much a program's latest launch moves its estimate: recent launches count most,
// and one slow launch (a cold cache, a page fault) does not set it alone.
constexpr double kCostWeight = 0.25;
// Idle flows left behind by ended sessions are swept once there are this many.
constexpr size_t kFlowsSwept = 64;

}  // namespace

uint64_t FairShare::Arrive(Request request) {
  request.share = std::isnan(request.share) ? 1 : std::clamp(request.share, kShareMin, kShareMax);
  cost_.try_emplace(request.program, -1.0);
  const uint64_t id = next_id_++;
  Flow& flow = flows_[request.flow];
  Launch launch;
  // A flow keeps up to kLag of what it missed: a busy flow's next launch often comes
  // a moment after its last one finished (its stream thread was handing it over), and
  // others must not take its turn for good then.
  const double floor = request.in_order ? virtual_time_ : virtual_time_ - kLag;
  launch.start = std::max(floor, flow.finish);
  launch.charged = Estimate(request.program) / request.share;
  launch.order = id;
  flow.finish = std::max(flow.finish, launch.start + launch.charged);
  if (flow.launches++ == 0) ++active_flows_;
  launch.request = std::move(request);
  launches_.emplace(id, std::move(launch));
  ++waiting_;
  found_ = false;
  return id;
}

uint64_t FairShare::Next() const {
  if (!found_) FindNext();
  return next_;
}

uint64_t FairShare::NextInOrder() const {
  if (!found_) FindNext();
  return next_in_order_;
}

void FairShare::FindNext() const {
  // Few wait at once (one launch per operation stream), so a scan is cheapest.
  const Launch* best = nullptr;
  next_ = 0;
  next_in_order_ = 0;
  for (const auto& [id, launch] : launches_) {
    if (launch.started) continue;
    if (launch.request.in_order) {
      if (next_in_order_ == 0 || id < next_in_order_) next_in_order_ = id;
    } else if (best == nullptr || launch.start < best->start ||
               (launch.start == best->start && launch.order < best->order)) {
      best = &launch;
      next_ = id;
    }
  }
  found_ = true;
}

void FairShare::Start(uint64_t id, absl::Time now) {
  auto it = launches_.find(id);
  if (it == launches_.end() || it->second.started) return;
  found_ = false;
  it->second.started = true;
  it->second.started_at = now;
  it->second.queued =
      Estimate(it->second.request.program) / std::max<size_t>(1, it->second.request.devices.size());
  queued_ += it->second.queued;
  --waiting_;
  virtual_time_ = std::max(virtual_time_, it->second.start);
  if (flows_.size() >= kFlowsSwept) {
    absl::erase_if(flows_, [&](const auto& entry) {
      return entry.second.launches == 0 && entry.second.finish <= virtual_time_ - kLag;
    });
  }
}

double FairShare::Finish(uint64_t id, absl::Time now, absl::Time inputs_ready) {
  auto it = launches_.find(id);
  if (it == launches_.end() || !it->second.started) return 0;
  Launch& launch = it->second;
  absl::Time began = std::max(launch.started_at, std::min(inputs_ready, now));
  for (int device : launch.request.devices) {
    auto last = last_finish_.find(device);
    if (last != last_finish_.end()) began = std::max(began, last->second);
    last_finish_[device] = std::max(now, last == last_finish_.end() ? now : last->second);
  }
  const double devices = std::max<size_t>(1, launch.request.devices.size());
  const double wall = std::max(0.0, absl::ToDoubleSeconds(now - began));
  const double took = wall * devices;
  for (int device : launch.request.devices) busy_[device] += wall;
  auto account = served_.find(launch.request.account);
  if (account == served_.end()) {
    const bool room = served_.size() < static_cast<size_t>(limits::kTenantsAccountedMax);
    account = served_.emplace(room ? launch.request.account : kOtherAccount, 0.0).first;
  }
  account->second += took;
  // Only programs that still exist: a deleted one's entry must not come back.
  if (auto cost = cost_.find(launch.request.program); cost != cost_.end()) {
    cost->second = cost->second < 0 ? took : cost->second + kCostWeight * (took - cost->second);
  }
  if (finished_at_.size() >= kFlowsSwept) {
    absl::erase_if(finished_at_, [&](const auto& entry) { return now - entry.second > kRecent; });
  }
  finished_at_[launch.request.flow] = now;
  Flow& flow = flows_[launch.request.flow];
  flow.finish += took / launch.request.share - launch.charged;
  Release(id);
  return took;
}

void FairShare::Withdraw(uint64_t id) {
  auto it = launches_.find(id);
  if (it == launches_.end()) return;
  if (!it->second.started) --waiting_;
  flows_[it->second.request.flow].finish -= it->second.charged;
  Release(id);
}

size_t FairShare::Competing(absl::Time now) const {
  size_t competing = active_flows_;
  for (const auto& [name, at] : finished_at_) {
    if (now - at > kRecent) continue;
    auto flow = flows_.find(name);
    if (flow == flows_.end() || flow->second.launches == 0) ++competing;
  }
  return competing;
}

double FairShare::Estimate(uint64_t program) const {
  auto it = cost_.find(program);
  return it == cost_.end() || it->second < 0 ? 0 : it->second;
}

void FairShare::Release(uint64_t id) {
  found_ = false;
  auto it = launches_.find(id);
  queued_ = launches_.size() == 1 ? 0 : std::max(0.0, queued_ - it->second.queued);
  auto flow = flows_.find(it->second.request.flow);
  // A flow ahead of the virtual time keeps its tag while idle: leaving and coming
  // back must not wipe out what it was served.
  if (--flow->second.launches == 0) {
    --active_flows_;
    if (flow->second.finish <= virtual_time_ - kLag) flows_.erase(flow);
  }
  launches_.erase(it);
}

}  // namespace switchyard::worker
