// The wire side of an event stream answered locally: a waiting page's GET
// /queue/events, for as long as its ticket waits, or the dashboard's GET
// /_room/history/events, for as long as the dashboard is open. An
// admission::EventFeed says what to send; the writer frames it (chunked for
// HTTP/1.1, delimited by the close for HTTP/1.0), sends a keep-alive comment
// after kKeepAliveEvery without a write, and ends the stream (terminating
// chunk). The client connection owns the state, the timers, the filing with
// its worker (ConnectionHost::addStream) and the ending of the request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "admission/admission.h"
#include "common/clock.h"
#include "http/request.h"
#include "http/response.h"
#include "worker/stream.h"

namespace concert::worker {

constexpr Millis kKeepAliveEvery = 15'000;  // an event stream's comment line when idle that long
constexpr size_t kMaxStreamBacklog = 64 * 1024;  // an event stream's client that reads nothing is closed

class EventStreamWriter {
 public:
  // `client`: where the stream goes; every byte written is added to `sent`.
  EventStreamWriter(Stream& client, uint64_t& sent) : client_(client), sent_(sent) {}

  struct Opened {
    bool stream = false;           // false: answer `response`, nothing was written
    http::LocalResponse response;  // stream: its head (status and headers), sent already
    bool ended = false;            // stream: the first event ended it already (finish())
  };
  // Opens `feed` for `request`; `may_keep_alive`: the connection may carry
  // another request after the stream (its request had no body left unread,
  // the worker does not drain).
  Opened open(std::unique_ptr<admission::EventFeed> feed, const http::Request& request, bool may_keep_alive,
              Millis now);

  enum class Next {
    Open,        // the stream goes on
    End,         // the feed ended it: finish()
    Backlogged,  // its client reads nothing (kMaxStreamBacklog unread): close the connection
  };
  // Asks the feed what to send now and sends it; `tick` (the worker's
  // one-second walk) also sends the keep-alive comment when due. `position`:
  // a position event went out.
  Next recheck(Millis now, bool tick, bool may_send_position, bool& position);

  // Where the worker files the stream (EventFeed::ticket).
  uint64_t ticket() const { return feed_->ticket(); }
  // Ends the stream on the wire; true when the connection may carry another request.
  bool finish();
  // Forgets the stream (the connection closes): nothing more is written.
  void drop() { feed_.reset(); }

 private:
  void write(std::string_view text, Millis now);

  Stream& client_;
  uint64_t& sent_;
  std::unique_ptr<admission::EventFeed> feed_;
  bool chunked_ = false;
  bool keep_alive_ = false;  // after the stream ends
  Millis written_ms_ = 0;
};

}  // namespace concert::worker
