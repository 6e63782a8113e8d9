// The body of a client connection's current request: how it is delimited
// (Content-Length or chunked), where its bytes go (dropped, collected whole
// for a local endpoint, or to the origin), how much of it came and when, and
// whether it broke a limit or its framing. The connection pumps it whenever
// client bytes arrive or the origin can take more, and acts on each step
// (connection.h); a body is never read before the request is admitted.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "http/parser.h"
#include "http/request.h"
#include "worker/stream.h"

namespace concert::worker {

constexpr size_t kMaxAdminBody = 64 * 1024;  // a collected JSON body: POST /_room/cap, /_room/mode

class RequestBody {
 public:
  enum class Sink { Discard, Collect, Upstream };
  // What one pump() did.
  enum class Step {
    Starved,    // nothing left to move for now
    Moved,      // bytes moved, the body goes on
    Finished,   // the last byte moved: done()
    TooLarge,   // over -max-body, or over kMaxAdminBody when collected: failed()
    Malformed,  // broken chunked framing: failed()
  };

  // A new request's body, as its head declares it; `now` counts as its last read.
  void start(const http::Request& request, Millis now);
  // Between requests: no body, nothing collected, Discard.
  void reset();

  bool done() const { return done_; }
  bool failed() const { return error_; }
  bool chunked() const { return mode_ == Mode::Chunked; }
  Sink sink() const { return sink_; }
  void sendTo(Sink sink) { sink_ = sink; }
  // Collect the body whole for a local endpoint; false when its declared
  // length is over kMaxAdminBody (nothing changed).
  bool collect();
  const std::string& collected() const { return collected_; }
  // What follows is no body of this request (a tunnel's bytes).
  void end() { done_ = true; }

  Millis lastRead() const { return read_ms_; }
  void readAt(Millis now) { read_ms_ = now; }

  // A Content-Length body already here whole is dropped (done() then): an
  // answer that does not use it needs not close the connection.
  void dropIfBuffered(Stream& client);

  // Moves what `client` has of the body into the sink (`origin` for
  // Upstream), as much as is there; `max_body` is -max-body.
  Step pump(Stream& client, http::MessageParser& parser, Stream* origin, int64_t max_body);

 private:
  enum class Mode { None, Length, Chunked };
  struct ChunkTarget;
  static void onChunk(void* arg, const char* data, size_t len);

  Mode mode_ = Mode::None;
  Sink sink_ = Sink::Discard;
  int64_t remaining_ = 0;  // Length: bytes still to come
  int64_t total_ = 0;      // bytes moved so far
  bool done_ = true;
  bool error_ = false;
  std::string collected_;
  Millis read_ms_ = 0;  // the body's last read
};

}  // namespace concert::worker
