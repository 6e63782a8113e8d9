// The cluster agent (agent.h).
#include "cluster/agent.h"

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include "cluster/engine.h"
#include "cluster/sentinel.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "common/log.h"
#include "shm/nonce.h"
#include "shm/segment.h"

namespace concert::cluster {

namespace {

constexpr Millis kRound = 100;
constexpr Millis kReconnect = 1'000;
constexpr Millis kSentinelTimeout = 250;  // each sentinel's, to connect and answer
constexpr size_t kMaxUnsent = 200'000;
constexpr size_t kNotesPerRound = 4'096;
constexpr int64_t kBlockMin = 64;
constexpr int64_t kBlockMax = 4'096;
constexpr int64_t kFetchLimit = 16'384;  // tickets one FETCH lists at most

std::string hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

std::string randomWord() {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, shm::randomNonce());
  return buf;
}

class Agent {
 public:
  explicit Agent(const AgentContext& context)
      : config_(*context.config),
        segment_(*context.segment),
        cluster_(segment_.cluster()),
        host_(hostName(segment_.cluster().hostId())),
        engine_host_(config_.cluster_url.host),
        engine_port_(config_.cluster_url.port),
        endpoint_(config_.cluster_url.viaSentinels() ? config_.cluster_url.master
                                                     : "redis://" + endpointText(engine_host_, engine_port_)),
        hosts_seen_(std::max(1, cluster_.hosts())) {}  // an agent started again keeps what the last one saw

  ~Agent() {
    dropConnection();
    for (event* e : events_) event_free(e);
    if (base_) event_base_free(base_);
  }

  int run() {
    base_ = event_base_new();
    if (!base_) return 1;
    for (int sig : {SIGTERM, SIGINT}) {
      event* e = evsignal_new(base_, sig, &Agent::onSignal, this);
      event_add(e, nullptr);
      events_.push_back(e);
    }
    tick_ = event_new(base_, -1, EV_PERSIST, &Agent::onTick, this);
    timeval every{0, static_cast<suseconds_t>(kRound * 1000)};
    event_add(tick_, &every);
    events_.push_back(tick_);
    if (cluster_.state() != shm::ClusterState::Up) holdShare();
    shareAdmitRate();
    connect();
    event_base_dispatch(base_);
    return 0;
  }

 private:
  enum class Call { Role, Select, Load, Notes, Sync, Fetch, Release };
  struct Pending {
    Agent* agent;
    uint64_t round;
    Call call;
    int64_t sent_us;
    // A script run by its SHA1: what to send as EVAL if the engine answers NOSCRIPT.
    const char* script = nullptr;
    std::vector<std::string> keys, args;
  };

  // ------------------------------------------------------------ connection
  void connect() {
    next_connect_ = monotonicMs() + kReconnect;
    if (config_.cluster_url.viaSentinels() && !findMaster()) return;
    redisAsyncContext* ac = redisAsyncConnect(engine_host_.c_str(), engine_port_);
    if (!ac || ac->err) {
      goDown(ac ? ac->errstr : "out of memory");
      if (ac) redisAsyncFree(ac);
      return;
    }
    ac->data = this;
    redisLibeventAttach(ac, base_);
    redisAsyncSetConnectCallback(ac, &Agent::onConnect);
    redisAsyncSetDisconnectCallback(ac, &Agent::onDisconnect);
    ac_ = ac;
    connected_ = false;
    round_deadline_ = monotonicMs() + roundTimeout();  // the connection too must come in time
    in_round_ = true;
    ++round_;
    // Named by a sentinel: believed once it says it is the master (a replica
    // the sentinels have not caught up with would refuse every write).
    if (config_.cluster_url.viaSentinels()) {
      const char* argv[] = {"ROLE"};
      const size_t lens[] = {4};
      send(Call::Role, 1, argv, lens);
    }
    if (config_.cluster_url.db != 0) {
      const std::string db = std::to_string(config_.cluster_url.db);
      const char* argv[] = {"SELECT", db.c_str()};
      const size_t lens[] = {6, db.size()};
      send(Call::Select, 2, argv, lens);
    }
    // The scripts once per connection; the rounds run them by their SHA1.
    for (const char* script : {kNotesScript, kSyncScript, kFetchScript}) {
      const char* argv[] = {"SCRIPT", "LOAD", script};
      const size_t lens[] = {6, 4, std::strlen(script)};
      send(Call::Load, 3, argv, lens);
    }
  }

  // -cluster redis+sentinel://: where the sentinels say the engine is now,
  // asked before each connection attempt (a failover moves it); a change is
  // logged once. No sentinel naming it is the engine away.
  bool findMaster() {
    const config::ClusterUrl& url = config_.cluster_url;
    const SentinelAnswer answer = askSentinels(url.sentinels, url.master, kSentinelTimeout);
    if (!answer.ok) {
      goDown("no sentinel names " + url.master + ": " + answer.error);
      return false;
    }
    if (answer.host == engine_host_ && answer.port == engine_port_) return true;
    engine_host_ = answer.host;
    engine_port_ = answer.port;
    const std::string address = endpointText(engine_host_, engine_port_);
    endpoint_ = url.master + " at redis://" + address;
    LOG_INFO("cluster engine: sentinel names master %s for %s", address.c_str(), url.master.c_str());
    return true;
  }

  // ROLE's answer, on a connection to where a sentinel named the engine:
  // anything but the master's and the rest of the connection's answers (a
  // replica's refusals) are not heeded, and it is dropped.
  void checkRole(const Reply& reply) {
    if (reply.type == Reply::Type::Array && !reply.elements.empty() && reply.elements[0].str == "master") return;
    ++round_;
    fail(reply.type == Reply::Type::Error
             ? "ROLE refused: " + reply.str
             : "not the master: ROLE says " +
                   (reply.elements.empty() ? std::string("nothing") : reply.elements[0].str));
  }

  static void onConnect(const redisAsyncContext* ac, int status) {
    auto* self = static_cast<Agent*>(ac->data);
    if (self->ac_ != ac) return;
    if (status != REDIS_OK) {
      self->ac_ = nullptr;  // hiredis frees the context after this callback
      self->connected_ = false;
      self->in_round_ = false;
      self->restoreNotes();
      self->goDown(ac->errstr[0] ? ac->errstr : "connection refused");
      return;
    }
    self->connected_ = true;
    self->in_round_ = false;
    self->startRound();
  }

  static void onDisconnect(const redisAsyncContext* ac, int) {
    auto* self = static_cast<Agent*>(ac->data);
    if (self->ac_ != ac) return;
    self->ac_ = nullptr;
    self->connected_ = false;
    self->in_round_ = false;
    self->restoreNotes();
    self->goDown(ac->errstr[0] ? ac->errstr : "connection closed");
  }

  // Outside hiredis callbacks only.
  void dropConnection() {
    if (!ac_) return;
    redisAsyncContext* ac = ac_;
    ac_ = nullptr;
    connected_ = false;
    in_round_ = false;
    restoreNotes();
    redisAsyncFree(ac);  // pending callbacks run with no reply and are ignored
  }

  void send(Call call, int argc, const char** argv, const size_t* lens, Pending* pending = nullptr) {
    if (!pending) pending = new Pending{this, round_, call, monotonicUs(), nullptr, {}, {}};
    if (!ac_ || redisAsyncCommandArgv(ac_, &Agent::onReply, pending, argc, argv, lens) != REDIS_OK) delete pending;
  }

  // One of the engine's scripts, by its SHA1 (the connection loaded it), or
  // by its text: `by_text`, or an EVALSHA the engine answered NOSCRIPT.
  void eval(Call call, const char* script, std::vector<std::string> keys, std::vector<std::string> args,
            bool by_text = false) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    const std::string nkeys = std::to_string(keys.size());
    const std::string& sha = shaOf(script);
    if (by_text || sha.empty()) {
      argv.push_back("EVAL");
      lens.push_back(4);
      argv.push_back(script);
      lens.push_back(std::strlen(script));
    } else {
      argv.push_back("EVALSHA");
      lens.push_back(7);
      argv.push_back(sha.c_str());
      lens.push_back(sha.size());
    }
    argv.push_back(nkeys.c_str());
    lens.push_back(nkeys.size());
    for (const std::string& k : keys) {
      argv.push_back(k.c_str());
      lens.push_back(k.size());
    }
    for (const std::string& a : args) {
      argv.push_back(a.c_str());
      lens.push_back(a.size());
    }
    auto* pending = new Pending{this, round_, call, monotonicUs(), nullptr, {}, {}};
    if (!by_text) {
      pending->script = script;
      pending->keys = std::move(keys);
      pending->args = std::move(args);
    }
    send(call, static_cast<int>(argv.size()), argv.data(), lens.data(), pending);
  }

  // Each script's SHA1, computed once.
  const std::string& shaOf(const char* script) {
    auto it = shas_.find(script);
    if (it == shas_.end()) it = shas_.emplace(script, scriptSha(script)).first;
    return it->second;
  }

  static void onReply(redisAsyncContext*, void* raw, void* privdata) {
    std::unique_ptr<Pending> pending(static_cast<Pending*>(privdata));
    Agent* self = pending->agent;
    if (pending->call == Call::Release) {
      self->released_ = true;
      event_base_loopexit(self->base_, nullptr);
      return;
    }
    // Before the round's: the connection's first round began before ROLE was answered.
    if (pending->call == Call::Role) {
      if (raw) self->checkRole(convertReply(static_cast<redisReply*>(raw)));
      return;
    }
    if (!raw || pending->round != self->round_ || !self->in_round_) return;  // dropped, or a round given up
    const int64_t micros = monotonicUs() - pending->sent_us;
    self->segment_.histograms().observe(shm::Histogram::EngineRoundTrip, 0, micros);
    self->cluster_.countRoundTrip();
    Reply reply = convertReply(static_cast<redisReply*>(raw));
    if (reply.type == Reply::Type::Error && pending->script && reply.str.rfind("NOSCRIPT", 0) == 0) {
      // The engine forgot the script (restarted empty, SCRIPT FLUSH): its text
      // this time, which also loads it again. Replies keep their order, so a
      // round's later scripts, refused too, follow in theirs.
      self->eval(pending->call, pending->script, std::move(pending->keys), std::move(pending->args), true);
      return;
    }
    if (reply.type == Reply::Type::Error) {
      self->fail("engine error: " + reply.str);
      return;
    }
    switch (pending->call) {
      case Call::Role:
      case Call::Select:
      case Call::Load:
      case Call::Release: break;
      case Call::Notes:
        // -1: the engine lost the room; SYNC (next in the pipe) says so and
        // these notes go after the re-enrolled line.
        if (reply.type == Reply::Type::Integer && reply.integer < 0)
          self->restoreNotes();
        else
          self->in_flight_.clear();
        break;
      case Call::Sync:
        self->sync_sent_ms_ = pending->sent_us / 1000;
        self->onSync(reply);
        break;
      case Call::Fetch: self->onFetch(reply); break;
    }
  }

  // A round went wrong: drop the connection once the callback returns.
  void fail(const std::string& why) {
    failure_ = why;
    event_base_once(base_, -1, EV_TIMEOUT, &Agent::onFail, this, nullptr);
  }

  static void onFail(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Agent*>(arg);
    self->dropConnection();
    self->goDown(self->failure_);
  }

  // ------------------------------------------------------------ rounds
  static void onTick(evutil_socket_t, short, void* arg) { static_cast<Agent*>(arg)->tick(); }

  void tick() {
    const Millis now = monotonicMs();
    collectNotes(now);
    // The engine away, -cluster-fail open: this host's own line moves on.
    if (cluster_.state() != shm::ClusterState::Up && cluster_.failOpen()) cluster_.publishAway(unplacedLine(), now);
    if (!ac_) {
      if (now >= next_connect_) connect();
      return;
    }
    if (in_round_) {
      if (now < round_deadline_) return;
      dropConnection();
      goDown("no answer within " + std::to_string(roundTimeout()) + " ms");
      return;
    }
    if (connected_) startRound();
  }

  Millis roundTimeout() const { return std::clamp<Millis>(config_.cluster_lease_ttl / 4, 250, 1'000); }

  // Until when the host uses the reservation this round brought: half the
  // lease TTL from when its SYNC was sent. The engine's lease began when the
  // script ran, later, so this ends first; the other half lets the requests
  // admitted here finish before the engine gives their slots to other hosts
  // (shm/cluster.h). Rounds renew it every kRound while all is well, and a
  // round slower than roundTimeout() (at most a quarter of the TTL) takes the
  // engine for away before it ends.
  Millis leaseEnd() const { return std::max<Millis>(1, sync_sent_ms_ + config_.cluster_lease_ttl / 2); }

  void collectNotes(Millis now) {
    for (const shm::ClusterNoteValue& note : cluster_.takeNotes(kNotesPerRound, now)) {
      if (note.kind == shm::NoteKind::Enroll) {
        ++enrolled_;
        unplaced_.push_back({now, note});
      }
      unsent_.push_back(noteArg(note));
    }
    if (unplaced_.size() > shm::kClusterMirror)
      unplaced_.erase(unplaced_.begin(), unplaced_.end() - static_cast<std::ptrdiff_t>(shm::kClusterMirror));
    while (unsent_.size() > kMaxUnsent) {
      // Touches go first: an enrolment or a departure lost costs a place.
      auto touch = std::find_if(unsent_.begin(), unsent_.end(), [](const std::string& s) { return s[0] == 'T'; });
      unsent_.erase(touch != unsent_.end() ? touch : unsent_.begin());
    }
  }

  // Tickets issued here that no line read from the engine lists yet, in the
  // order they were issued.
  std::vector<shm::ClusterLineEntry> unplacedLine() const {
    std::vector<shm::ClusterLineEntry> out;
    out.reserve(unplaced_.size());
    for (const auto& [at, note] : unplaced_) out.push_back({note.id, note.nonce, note.issued_ms});
    return out;
  }

  void restoreNotes() {
    unsent_.insert(unsent_.begin(), in_flight_.begin(), in_flight_.end());
    in_flight_.clear();
  }

  void startRound() {
    const Millis now = monotonicMs();
    round_started_ms_ = now;
    in_round_ = true;
    ++round_;
    round_deadline_ = now + roundTimeout();
    if (!unsent_.empty()) {
      const size_t n = std::min(unsent_.size(), kNotesPerRound);
      in_flight_.assign(unsent_.begin(), unsent_.begin() + static_cast<std::ptrdiff_t>(n));
      unsent_.erase(unsent_.begin(), unsent_.begin() + static_cast<std::ptrdiff_t>(n));
      std::vector<std::string> args = {std::to_string(config_.token_ttl), std::to_string(config_.first_poll_grace),
                                       epoch_, std::to_string(config_.max_tickets_per_client)};
      args.insert(args.end(), in_flight_.begin(), in_flight_.end());
      eval(Call::Notes, kNotesScript, notesKeys(config_.cluster_room), args);
    }
    SyncRequest r;
    r.host = host_;
    r.lease_ttl_ms = config_.cluster_lease_ttl;
    r.lease = config_.cluster_lease;
    r.busy = segment_.pages().occupancy();
    r.wanted = static_cast<int64_t>(std::min<uint64_t>(cluster_.takeWanted(), 1'000'000));
    // A value changed here since the last round goes to the room, and so
    // does one a reload changed in the file (a new agent has no last round).
    pushing_ = cluster_.pendingPush();
    sent_cap_ = cluster_.cap();
    r.cap = sent_cap_;
    r.push_cap = (synced_cap_ != 0 && sent_cap_ != synced_cap_) || (pushing_ & shm::ClusterLine::kPushCap) != 0;
    sent_mode_ = std::string(shm::roomModeName(segment_.modes().mode()));
    r.mode = sent_mode_;
    r.push_mode = (!synced_mode_.empty() && sent_mode_ != synced_mode_) || (pushing_ & shm::ClusterLine::kPushMode) != 0;
    r.epoch = epoch_;
    r.new_epoch = randomWord();
    if (blockWanted(now)) {
      block_size_ = std::clamp<int64_t>(4 * enrolled_, kBlockMin, kBlockMax);
      r.block = block_size_;
    }
    enrolled_ = 0;
    r.bans = newBans(now);
    r.claim_window_ms = config_.claim_window;
    r.marks_version = marks_version_;
    // A scheduled sale's pre-queue holds the line here (the mode itself is the room's).
    r.held = segment_.modes().mode() == shm::RoomMode::Open && !segment_.modes().lineMoves();
    r.shuffle = config_.shuffle_prequeue;
    eval(Call::Sync, kSyncScript, syncKeys(config_.cluster_room), syncArgs(r));
  }

  bool blockWanted(Millis now) const {
    return cluster_.numbersLeft() < kBlockMin / 2 || now - block_at_ >= shm::ClusterLine::kBlockAgeMs;
  }

  // Bans that began here and were not sent yet (or were made longer).
  std::vector<std::string> newBans(Millis now) {
    std::vector<std::string> out;
    const int64_t unix_now = unixSeconds();
    for (const shm::ClientBan& ban : segment_.clients().bans(now)) {
      const std::string key = hex(ban.key.data(), ban.key.size());
      const int64_t until = unix_now + ban.seconds_left;
      auto sent = sent_bans_.find(key);
      if (sent != sent_bans_.end() && sent->second + 2 >= until) continue;
      sent_bans_[key] = until;
      out.push_back(key + ":" + std::to_string(until));
    }
    for (auto it = sent_bans_.begin(); it != sent_bans_.end();) it = it->second < unix_now ? sent_bans_.erase(it) : ++it;
    return out;
  }

  void onSync(const Reply& reply) {
    std::optional<SyncReply> sync = parseSync(reply);
    if (!sync) {
      fail("engine answered SYNC with something unexpected");
      return;
    }
    const Millis now = monotonicMs();
    sync_ = *sync;
    if (pushing_ != 0) cluster_.pushed(pushing_);  // the engine has the reload's values now
    pushing_ = 0;
    const bool lost = sync->lost && !epoch_.empty();
    if (lost) reenroll();  // before the notes of this round, which the engine refused
    epoch_ = sync->epoch;
    if (sync->block_first != 0) {
      cluster_.offerNumbers(sync->block_first, static_cast<uint32_t>(block_size_));
      block_at_ = now;
    }
    // The engine's cap and mode, unless this host changed them during the round.
    if (cluster_.cap() == sent_cap_ && sync->round.cap >= 1) cluster_.setCap(sync->round.cap);
    synced_cap_ = sync->round.cap;
    if (std::string(shm::roomModeName(segment_.modes().mode())) == sent_mode_) {
      std::optional<shm::RoomMode> mode = shm::parseRoomMode(sync->mode);
      if (mode && *mode != segment_.modes().mode()) {
        segment_.modes().set(*mode);
        LOG_INFO("room mode set to %s by another host", sync->mode.c_str());
      }
    }
    synced_mode_ = sync->mode;
    if (sync->marks != SyncReply::Marks::None) {
      takeMarks(*sync);
      marks_version_ = sync->marks_version;
    }
    if (sync->missed > 0) {
      segment_.stats().count(shm::Counter::MissedTurnsTotal, static_cast<uint64_t>(sync->missed));
      LOG_INFO("cluster: %lld turns missed: not taken within the claim window", static_cast<long long>(sync->missed));
    }
    if (sync->shuffled > 0)
      LOG_INFO("cluster: pre-queue closed: %lld visitors hold their shuffled places", static_cast<long long>(sync->shuffled));
    if (sync->removed > 0)
      LOG_INFO("cluster: %lld tickets of newly banned clients taken out of the line", static_cast<long long>(sync->removed));
    if (sync->reaped > 0)
      LOG_INFO("cluster: %lld tickets abandoned (unseen past -token-ttl or -first-poll-grace)",
               static_cast<long long>(sync->reaped));
    // After a loss the cached line stays until the re-enrolled one is read.
    if ((sync->version != version_ || loading_) && !lost) {
      fetchLine();
      return;
    }
    finishRound(nullptr, false);
  }

  // What changed in the line since this host's copy (fetch.lua).
  void fetchLine() {
    eval(Call::Fetch, kFetchScript, fetchKeys(config_.cluster_room),
         {std::to_string(kFetchLimit), std::to_string(since_order_), std::to_string(version_)});
  }

  // The room's marks into this host's copy: every list anew, or the changes
  // since the last round applied to the lists kept here; then the tables in
  // the segment that changed (expired marks dropped on the way).
  void takeMarks(const SyncReply& sync) {
    bool changed[4] = {};
    if (sync.marks == SyncReply::Marks::Lists) {
      const std::vector<shm::ClusterMarkValue>* lists[4] = {&sync.bans, &sync.promoted, &sync.revoked, &sync.full};
      for (size_t i = 0; i < 4; ++i) {
        marks_[i].clear();
        for (const shm::ClusterMarkValue& m : *lists[i]) marks_[i][{m.a, m.b}] = m.until;
        changed[i] = true;
      }
    }
    for (const SyncReply::MarkChange& c : sync.changes) {
      auto& list = marks_[static_cast<size_t>(c.list)];
      if (c.mark.until == 0)
        list.erase({c.mark.a, c.mark.b});
      else
        list[{c.mark.a, c.mark.b}] = c.mark.until;
      changed[static_cast<size_t>(c.list)] = true;
    }
    const int64_t now = unixSeconds();
    for (size_t i = 0; i < 4; ++i) {
      if (!changed[i]) continue;
      std::vector<shm::ClusterMarkValue> table;
      for (auto it = marks_[i].begin(); it != marks_[i].end();) {
        if (it->second <= now) {
          it = marks_[i].erase(it);
          continue;
        }
        table.push_back({it->first.first, it->first.second, it->second});
        ++it;
      }
      switch (static_cast<MarkList>(i)) {
        case MarkList::Bans: cluster_.setRemoteBans(table); break;
        case MarkList::Promoted: cluster_.setPromotions(table); break;
        case MarkList::Revoked: cluster_.setRevocations(table); break;
        case MarkList::Full: cluster_.setFullClients(table); break;
      }
    }
  }

  void onFetch(const Reply& reply) {
    std::optional<FetchReply> fetch = parseFetch(reply);
    if (!fetch) {
      fail("engine answered FETCH with something unexpected");
      return;
    }
    if (fetch->reset) {
      line_.clear();
      placed_at_.clear();
      since_order_ = -1;
    }
    for (uint64_t id : fetch->gone) forgetPlace(id);
    for (const FetchReply::Placed& p : fetch->placed) {
      forgetPlace(p.entry.id);  // a ticket that moved comes again under its new number
      const std::pair<int, int64_t> at{sectionRank(p.entry.section), p.order};
      line_[at] = p.entry;
      placed_at_[p.entry.id] = at;
      since_order_ = std::max(since_order_, p.order);
    }
    version_ = fetch->version;
    // A long line read anew comes a page a round (a round stays short): the
    // copy meanwhile holds what was read, the head first, marked truncated;
    // the next round reads on whether or not the line moved.
    loading_ = fetch->more;
    // The line read lists every enrolment this round sent.
    if (!loading_) std::erase_if(unplaced_, [this](const auto& u) { return u.first < round_started_ms_; });
    std::vector<shm::ClusterLineEntry> head;
    head.reserve(std::min<size_t>(line_.size(), shm::kClusterMirror));
    for (auto it = line_.begin(); it != line_.end() && head.size() < shm::kClusterMirror; ++it) head.push_back(it->second);
    finishRound(&head, loading_ || line_.size() > head.size());
  }

  // Returned tickets first, then the line, then missed ones (LineSection).
  static int sectionRank(shm::LineSection section) {
    return section == shm::LineSection::Returned ? 0 : section == shm::LineSection::Waiting ? 1 : 2;
  }

  void forgetPlace(uint64_t id) {
    auto it = placed_at_.find(id);
    if (it == placed_at_.end()) return;
    line_.erase(it->second);
    placed_at_.erase(it);
  }

  void finishRound(const std::vector<shm::ClusterLineEntry>* head, bool truncated) {
    in_round_ = false;
    shm::ClusterRound& round = sync_.round;
    round.lease_until_ms = leaseEnd();
    round.cap = 0;  // the engine's cap was taken in onSync, unless this host changed it during the round
    const bool was_up = cluster_.state() == shm::ClusterState::Up;
    // The share first: the held requests the publication wakes find their slots.
    segment_.pages().setShare(static_cast<int32_t>(std::clamp<int64_t>(round.reserved, 0, INT32_MAX)));
    cluster_.publish(round, head, truncated, monotonicMs());
    hosts_seen_ = std::max(1, round.hosts);
    shareAdmitRate();
    if (!was_up)
      LOG_INFO("cluster engine %s up: %d host(s) share cap %lld; %lld slot(s) reserved here, %lld waiting", endpoint_.c_str(),
               round.hosts, static_cast<long long>(round.cap), static_cast<long long>(round.reserved),
               static_cast<long long>(round.depth));
  }

  // The engine lost the room: the line this host cached goes back in, in its
  // order (every host sends the same one; enrolling is idempotent).
  void reenroll() {
    // The whole line as last read (the copy in the segment holds only its
    // head, and perhaps Local tickets, which are still in the notes to send).
    std::vector<std::string> notes;
    for (const auto& [at, e] : line_) notes.push_back(noteArg({shm::NoteKind::Enroll, e.id, e.nonce, e.issued_ms}, true));
    const size_t count = notes.size();
    unsent_.insert(unsent_.begin(), notes.begin(), notes.end());
    cluster_.hidePositionsUntil(monotonicMs() + config_.first_poll_grace + 2 * kRound);
    line_.clear();
    placed_at_.clear();
    since_order_ = -1;
    loading_ = false;
    version_ = -1;
    marks_version_ = -1;
    sent_bans_.clear();  // the engine lost them too
    LOG_WARN("cluster engine %s lost the room's data: re-enrolling %zu waiting visitors in their order; no new "
             "slots anywhere for %s",
             endpoint_.c_str(), count, config::goDurationString(config_.cluster_lease_ttl).c_str());
  }

  // ------------------------------------------------------------ away
  void goDown(const std::string& why) {
    next_connect_ = std::max(next_connect_, monotonicMs() + kReconnect / 4);
    version_ = -1;  // back, the line is read again (the copy may hold Local tickets meanwhile)
    const shm::ClusterState before = cluster_.state();
    if (before != shm::ClusterState::Up && down_logged_) {
      holdShare();
      return;
    }
    cluster_.setState(shm::ClusterState::Down);
    holdShare();
    down_logged_ = true;
    if (cluster_.failOpen())
      LOG_ERROR("cluster engine %s unreachable (%s): -cluster-fail open: this host admits up to %d on its own",
                endpoint_.c_str(), why.c_str(), segment_.pages().cap());
    else
      LOG_ERROR("cluster engine %s unreachable (%s): -cluster-fail closed: no new admissions here", endpoint_.c_str(),
                why.c_str());
  }

  // -admit-rate holds for the room: each host meters its part of it, the
  // rate / hosts last seen (and of the burst, at least one), whether the
  // engine is up or away. An idle host's part goes unused: the room admits
  // at most the rate, never more.
  void shareAdmitRate() {
    if (config_.admit_interval_ns <= 0) return;
    segment_.admitRate().configure(config_.admit_interval_ns * hosts_seen_,
                                   std::max<int64_t>(1, config_.admit_burst_tokens / hosts_seen_), monotonicNs());
  }

  // The share while the engine is away (or not reached yet): cap / hosts
  // last seen with open, nothing with closed.
  void holdShare() {
    if (cluster_.state() == shm::ClusterState::Joining) {
      segment_.pages().setShare(0);
      return;
    }
    const int64_t share = cluster_.failOpen() ? std::max<int64_t>(1, cluster_.cap() / std::max(1, hosts_seen_)) : 0;
    segment_.pages().setShare(static_cast<int32_t>(std::min<int64_t>(share, INT32_MAX)));
  }

  // ------------------------------------------------------------ signals
  static void onSignal(evutil_socket_t sig, short, void* arg) {
    auto* self = static_cast<Agent*>(arg);
    if (sig == SIGINT && self->connected_ && !self->releasing_) {
      // The host stops: its reservation goes back now rather than at the lease's end.
      self->releasing_ = true;
      self->in_round_ = false;
      ++self->round_;
      self->eval(Call::Release, kReleaseScript, releaseKeys(self->config_.cluster_room), {self->host_}, true);
      timeval wait{0, 500'000};
      event_base_loopexit(self->base_, &wait);
      return;
    }
    event_base_loopexit(self->base_, nullptr);
  }

  const config::Config& config_;
  shm::Segment& segment_;
  shm::ClusterLine& cluster_;
  const std::string host_;
  std::string engine_host_;  // where the engine is: -cluster's, or as the sentinels last named it
  uint16_t engine_port_;
  std::string endpoint_;  // the engine in the log
  int hosts_seen_;
  event_base* base_ = nullptr;
  event* tick_ = nullptr;
  std::vector<event*> events_;
  redisAsyncContext* ac_ = nullptr;
  bool connected_ = false;
  bool in_round_ = false;
  bool releasing_ = false;
  bool released_ = false;
  bool down_logged_ = false;
  uint64_t round_ = 0;
  Millis round_deadline_ = 0;
  Millis next_connect_ = 0;
  std::string failure_;
  std::deque<std::string> unsent_;
  std::vector<std::pair<Millis, shm::ClusterNoteValue>> unplaced_;  // Enroll notes, when taken
  Millis round_started_ms_ = 0;
  std::vector<std::string> in_flight_;
  SyncReply sync_;
  Millis sync_sent_ms_ = 0;  // when the last answered SYNC was sent (monotonic)
  std::map<const char*, std::string> shas_;
  std::string epoch_;
  int64_t version_ = -1;      // P:ver as the copy below reflects it (-1: none)
  int64_t since_order_ = -1;  // the last place number in it
  bool loading_ = false;      // read anew, and pages of it remain
  std::map<std::pair<int, int64_t>, shm::ClusterLineEntry> line_;  // the room's line: (section, number) -> ticket
  std::map<uint64_t, std::pair<int, int64_t>> placed_at_;          // id -> its key in line_
  int64_t marks_version_ = -1;
  uint32_t pushing_ = 0;  // what this round pushes because a reload asked (ClusterLine::pendingPush)
  int64_t synced_cap_ = 0;
  int64_t sent_cap_ = 0;
  std::string synced_mode_;
  std::string sent_mode_;
  int64_t enrolled_ = 0;
  int64_t block_size_ = kBlockMin;
  Millis block_at_ = -shm::ClusterLine::kBlockAgeMs;
  std::map<std::string, int64_t> sent_bans_;
  std::map<std::pair<uint64_t, uint64_t>, int64_t> marks_[4];  // the room's marks by MarkList: (a, b) -> end
};

}  // namespace

std::string hostName(uint64_t host_id) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "localhost");
  char id[20];
  std::snprintf(id, sizeof id, "%016" PRIx64, host_id);
  return std::string(name) + ":" + id;
}

void runAgentProcess(const AgentContext& context) {
  int status = 1;
  try {
    log::setRole("cluster");
    if (!common::enterChildProcess(context.close_fds, context.drop_privileges, context.master_pid)) _exit(1);
    Agent agent(context);
    status = agent.run();
  } catch (const std::exception& e) {
    LOG_ERROR("cluster agent failed: %s", e.what());
  }
  _exit(status);
}

}  // namespace concert::cluster
