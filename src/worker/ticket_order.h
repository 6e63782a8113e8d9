// Client connections filed under a ticket number and walked in ticket
// order: the worker's page requests held by -queue-hold, and its waiting
// pages' event streams (GET /queue/events). Only the worker's own loop
// thread touches it.
//
// The key is (ticket, filing sequence): the sequence tells apart two
// connections on one ticket (a cookie shared by two tabs) and a request from
// the one filed after it on the same connection. Re-filing a connection gives
// it a new key.
//
// walk() rechecks in ticket order and, on a wake-up, stops at the first
// connection that is still filed under the key it had before its recheck: its
// ticket is still not ready, so no later one is either. A ticket is ready
// when fewer than cap unfinished tickets are ahead of it; every later ticket
// has that one (unfinished) ahead of it as well as everything ahead of it.
// With n connections filed, a release costs one recheck, not n; whatever
// finishes a ticket afterwards wakes the worker again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

namespace concert::worker {

class ClientConnection;

class TicketOrder {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (ticket, filing sequence)

  // Files `connection` under `ticket`, or re-files it there (at the back of
  // that ticket's connections) if it was filed already.
  void file(ClientConnection* connection, uint64_t ticket) {
    remove(connection);
    const Key key(ticket, seq_++);
    order_.emplace(key, connection);
    at_[connection] = key;
  }

  // False when it was not filed.
  bool remove(ClientConnection* connection) {
    auto at = at_.find(connection);
    if (at == at_.end()) return false;
    order_.erase(at->second);
    at_.erase(at);
    return true;
  }

  std::optional<uint64_t> ticketOf(ClientConnection* connection) const {
    auto at = at_.find(connection);
    if (at == at_.end()) return std::nullopt;
    return at->second.first;
  }

  bool empty() const { return order_.empty(); }
  size_t size() const { return order_.size(); }

  // Calls recheck(connection) in ticket order; `every`: the whole list (a
  // timer), else up to the first connection that stays filed where it was
  // (a wake-up). A recheck may remove or re-file any connection, its own
  // included: the walk goes on from the key it was at.
  template <typename Recheck>
  void walk(bool every, Recheck&& recheck) {
    auto it = order_.begin();
    while (it != order_.end()) {
      const Key key = it->first;
      ClientConnection* connection = it->second;
      recheck(connection);
      auto at = at_.find(connection);
      const bool unchanged = at != at_.end() && at->second == key;
      if (unchanged && !every) break;
      it = order_.upper_bound(key);
    }
  }

 private:
  std::map<Key, ClientConnection*> order_;
  std::unordered_map<ClientConnection*, Key> at_;
  uint64_t seq_ = 0;
};

}  // namespace concert::worker
