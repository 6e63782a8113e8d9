// The current request's body; see request_body.h.
#include "worker/request_body.h"

#include <algorithm>

namespace concert::worker {

struct RequestBody::ChunkTarget {
  RequestBody* body;
  Stream* origin;
  int64_t max_body;
};

void RequestBody::start(const http::Request& request, Millis now) {
  total_ = 0;
  error_ = false;
  if (request.chunked) {
    mode_ = Mode::Chunked;
    done_ = false;
  } else if (request.content_length > 0) {
    mode_ = Mode::Length;
    remaining_ = request.content_length;
    done_ = false;
  } else {
    mode_ = Mode::None;
    done_ = true;
  }
  if (!done_) read_ms_ = now;
}

void RequestBody::reset() {
  collected_.clear();
  mode_ = Mode::None;
  done_ = true;
  error_ = false;
  sink_ = Sink::Discard;
}

bool RequestBody::collect() {
  if (mode_ == Mode::Length && remaining_ > static_cast<int64_t>(kMaxAdminBody)) return false;
  collected_.clear();
  sink_ = Sink::Collect;
  return true;
}

void RequestBody::dropIfBuffered(Stream& client) {
  if (done_ || error_ || mode_ != Mode::Length || client.input().size() < static_cast<size_t>(remaining_)) return;
  client.consume(static_cast<size_t>(remaining_));
  remaining_ = 0;
  done_ = true;
}

RequestBody::Step RequestBody::pump(Stream& client, http::MessageParser& parser, Stream* origin, int64_t max_body) {
  const Buffer& in = client.input();
  const size_t avail = in.size();
  if (done_ || avail == 0) return Step::Starved;
  if (mode_ == Mode::Length) {
    size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(avail), remaining_));
    switch (sink_) {
      case Sink::Upstream: origin->writeFrom(client, n); break;
      case Sink::Collect:
        collected_.append(in.data(), n);
        client.consume(n);
        break;
      case Sink::Discard: client.consume(n); break;
    }
    remaining_ -= static_cast<int64_t>(n);
    total_ += static_cast<int64_t>(n);
    if (remaining_ != 0) return Step::Moved;
    done_ = true;
    return Step::Finished;
  }
  size_t consumed = 0;
  ChunkTarget target{this, origin, max_body};
  http::ParseStatus s = parser.feedChunked(in.data(), in.size(), &consumed, &RequestBody::onChunk, &target);
  client.consume(consumed);
  if (error_ || s == http::ParseStatus::Error) {
    const Step step = error_ ? Step::TooLarge : Step::Malformed;
    error_ = true;
    return step;
  }
  if (s != http::ParseStatus::BodyDone) return Step::Moved;
  done_ = true;
  return Step::Finished;
}

void RequestBody::onChunk(void* arg, const char* data, size_t len) {
  auto* target = static_cast<ChunkTarget*>(arg);
  RequestBody& body = *target->body;
  if (len == 0) return;
  body.total_ += static_cast<int64_t>(len);
  if (body.total_ > target->max_body) {
    body.error_ = true;
    return;
  }
  switch (body.sink_) {
    case Sink::Upstream:
      if (target->origin) target->origin->writeChunk(data, len);
      break;
    case Sink::Collect:
      if (body.collected_.size() + len > kMaxAdminBody) {
        body.error_ = true;
        return;
      }
      body.collected_.append(data, len);
      break;
    case Sink::Discard: break;
  }
}

}  // namespace concert::worker
