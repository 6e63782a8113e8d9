// The JSON writer: Go-compatible bytes.
#include <doctest/doctest.h>

#include "common/json.h"

using namespace concert::common;

TEST_CASE("JsonObject writes Go's bytes") {
  CHECK(JsonObject().str() == "{}");
  CHECK(JsonObject().add("a", true).add("b", int64_t{-3}).add("c", "x").str() == "{\"a\":true,\"b\":-3,\"c\":\"x\"}");
  CHECK(JsonObject().add("s", "q\"b\\n\n<&>\x01").str() == "{\"s\":\"q\\\"b\\\\n\\n<&>\\u0001\"}");
  CHECK(JsonObject().add("u", "\xe2\x80\xa8").str() == "{\"u\":\"\\u2028\"}");
  CHECK(JsonObject().addNull("n").add("e", std::optional<int64_t>()).add("f", std::optional<int64_t>(42)).str() ==
        "{\"n\":null,\"e\":null,\"f\":42}");
  std::string f;
  appendJsonFloat(f, 0.0);
  CHECK(f == "0");
  f.clear();
  appendJsonFloat(f, 1.0);
  CHECK(f == "1");
  f.clear();
  appendJsonFloat(f, 0.1);
  CHECK(f == "0.1");
  f.clear();
  appendJsonFloat(f, 2.5);
  CHECK(f == "2.5");
  f.clear();
  appendJsonFloat(f, 1e-7);
  CHECK(f == "1e-7");
  f.clear();
  appendJsonFloat(f, 1e21);
  CHECK(f == "1e+21");
  f.clear();
  appendJsonFloat(f, 123456789.0);
  CHECK(f == "123456789");
}
