// IP addresses and CIDR lists (-trusted-proxies, -bypass-cidrs): parsing,
// the errors an operator sees, matching across the address families.
#include <doctest/doctest.h>

#include "config/cidr.h"
#include "config/schema.h"
#include "helpers.h"

using namespace concert::config;
using namespace concert::config::testing;

namespace {

IpAddress ip(std::string_view text) {
  std::optional<IpAddress> a = parseIpAddress(text);
  REQUIRE_MESSAGE(a.has_value(), text);
  return *a;
}

CidrList list(std::string_view text) {
  CidrListParse p = parseCidrList(text);
  INFO(joined(p.errors));
  REQUIRE(p.errors.empty());
  return p.cidrs;
}

}  // namespace

TEST_CASE("addresses: IPv4, IPv6, mapped IPv4 becomes IPv4, everything else refused") {
  CHECK_FALSE(ip("192.0.2.1").v6);
  CHECK(ipAddressText(ip("192.0.2.1")) == "192.0.2.1");
  CHECK(ip("2001:db8::1").v6);
  CHECK(ipAddressText(ip("2001:DB8:0:0:0:0:0:1")) == "2001:db8::1");
  CHECK(ip("::ffff:192.0.2.1") == ip("192.0.2.1"));
  CHECK(ipAddressText(ip("::ffff:192.0.2.1")) == "192.0.2.1");
  CHECK(ip("::1").v6);
  for (const char* bad : {"", "localhost", "192.0.2", "192.0.2.256", "192.0.2.1.5", "1.2.3.4 ", "[::1]", "::1%lo",
                          "192.0.2.1:80", "2001:db8::g", "0x7f.0.0.1", "unknown"})
    CHECK_MESSAGE(!parseIpAddress(bad), bad);
}

TEST_CASE("CIDR lists: ranges, bare addresses, spaces, empty entries, canonical text") {
  CidrList l = list(" 10.0.0.0/8, 127.0.0.1 ,,2001:db8::/32, ::1 , 0.0.0.0/0");
  REQUIRE(l.size() == 5);
  CHECK(l[0].bits == 8);
  CHECK(l[1].bits == 32);
  CHECK(l[2].bits == 32);
  CHECK(l[2].network.v6);
  CHECK(l[3].bits == 128);
  CHECK(l[4].bits == 0);
  CHECK(cidrListText(l) == "10.0.0.0/8,127.0.0.1,2001:db8::/32,::1,0.0.0.0/0");
  CHECK(list("").empty());
  CHECK(list(" , ").empty());
  // An IPv4-mapped range is the IPv4 range.
  CidrList mapped = list("::ffff:10.0.0.0/104,::ffff:192.0.2.7");
  CHECK(cidrListText(mapped) == "10.0.0.0/8,192.0.2.7");
}

TEST_CASE("CIDR lists: bad entries are errors naming the entry; host bits are a warning") {
  struct Bad {
    const char* text;
    const char* error;
  };
  for (const Bad& bad :
       {Bad{"10.0.0.0/33", "\"10.0.0.0/33\": prefix length must be 0 to 32"},
        Bad{"2001:db8::/129", "prefix length must be 0 to 128"}, Bad{"10.0.0.0/", "prefix length"},
        Bad{"10.0.0.0/-1", "prefix length"}, Bad{"10.0.0.0/8x", "prefix length"}, Bad{"10.0.0.0/ 8", "prefix length"},
        Bad{"::ffff:10.0.0.0/64", "IPv4-mapped range needs a prefix length of 96 or more"},
        Bad{"10.0.0/8", "\"10.0.0/8\" is not an IP address or CIDR range"},
        Bad{"office", "\"office\" is not an IP address"}, Bad{"10.0.0.0/8 192.168.0.0/16", "prefix length"}}) {
    CidrListParse p = parseCidrList(bad.text);
    INFO(bad.text, " -> ", joined(p.errors));
    CHECK(p.cidrs.empty());
    CHECK(contains(p.errors, bad.error));
  }
  CidrListParse mixed = parseCidrList("10.0.0.0/8, nope, 192.168.0.0/16");
  CHECK(mixed.errors.size() == 1);

  CidrListParse sloppy = parseCidrList("10.1.2.3/8");
  CHECK(sloppy.errors.empty());
  CHECK(contains(sloppy.warnings, "\"10.1.2.3/8\" has host bits set; using 10.0.0.0/8"));
  REQUIRE(sloppy.cidrs.size() == 1);
  CHECK(cidrText(sloppy.cidrs[0]) == "10.0.0.0/8");
}

TEST_CASE("matching: IPv4 and IPv6 ranges, odd prefix lengths, families kept apart") {
  CidrList l = list("10.0.0.0/8,192.168.1.128/25,2001:db8:abcd::/48,fe80::/10");
  CHECK(cidrListContains(l, ip("10.255.0.1")));
  CHECK_FALSE(cidrListContains(l, ip("11.0.0.1")));
  CHECK(cidrListContains(l, ip("192.168.1.200")));
  CHECK_FALSE(cidrListContains(l, ip("192.168.1.127")));
  CHECK(cidrListContains(l, ip("2001:db8:abcd:1::5")));
  CHECK_FALSE(cidrListContains(l, ip("2001:db8:abce::5")));
  CHECK(cidrListContains(l, ip("febf::1")));
  CHECK_FALSE(cidrListContains(l, ip("fec0::1")));
  // A mapped IPv4 address is matched by IPv4 ranges, and only by them.
  CHECK(cidrListContains(l, ip("::ffff:10.1.2.3")));
  CHECK_FALSE(cidrListContains(list("::/0"), ip("10.1.2.3")));
  CHECK(cidrListContains(list("::/0"), ip("2001:db8::1")));
  CHECK_FALSE(cidrListContains(list("0.0.0.0/0"), ip("2001:db8::1")));
  CHECK(cidrListContains(list("0.0.0.0/0"), ip("203.0.113.9")));
  CHECK(cidrListContains(list("127.0.0.1"), ip("127.0.0.1")));
  CHECK_FALSE(cidrListContains(list("127.0.0.1"), ip("127.0.0.2")));
  CHECK(cidrListContains(list("::1"), ip("::1")));
  CHECK_FALSE(cidrListContains({}, ip("127.0.0.1")));
}

TEST_CASE("-trusted-proxies and -bypass-cidrs through the loader: every source, errors name the setting") {
  const LoadResult set =
      run({"-trusted-proxies", "127.0.0.1/32, ::1", "-bypass-cidrs=10.0.0.0/8"}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& c = okConfig(set);
  CHECK(cidrListText(c.trusted_proxies) == "127.0.0.1,::1");
  CHECK(cidrListText(c.bypass_cidrs) == "10.0.0.0/8");
  CHECK(valueText(*findSetting("trusted-proxies"), c) == "127.0.0.1,::1");

  const LoadResult defaults = run({}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& d = okConfig(defaults);
  CHECK(d.trusted_proxies.empty());
  CHECK(d.bypass_cidrs.empty());

  LoadResult flag = run({"-trusted-proxies", "10.0.0.0/40"}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  CHECK_FALSE(flag.ok());
  CHECK(contains(flag.errors, "-trusted-proxies (flag): \"10.0.0.0/40\": prefix length must be 0 to 32"));

  LoadResult env = run({}, {{"CONCERT_ADMIT_SECRET", kSecret}, {"CONCERT_BYPASS_CIDRS", "monitoring"}});
  CHECK_FALSE(env.ok());
  CHECK(contains(env.errors, "CONCERT_BYPASS_CIDRS"));
  CHECK(contains(env.errors, "\"monitoring\" is not an IP address or CIDR range"));

  LoadResult warned = run({"-bypass-cidrs", "10.9.8.7/16"}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  CHECK(warned.ok());
  CHECK(contains(warned.warnings, "-bypass-cidrs"));
  CHECK(contains(warned.warnings, "has host bits set; using 10.9.0.0/16"));

  TempDir dir;
  std::string file =
      dir.write("c.yaml", "trusted-proxies:\n  - 127.0.0.1/32\n  - 10.0.0.0/8\nbypass-cidrs: 192.0.2.0/24\n");
  const LoadResult from_file = run({"-c", file}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& y = okConfig(from_file);
  CHECK(cidrListText(y.trusted_proxies) == "127.0.0.1,10.0.0.0/8");
  CHECK(cidrListText(y.bypass_cidrs) == "192.0.2.0/24");
  std::string bad = dir.write("bad.yaml", "trusted-proxies:\n  - 127.0.0.1/32\n  - nope\n");
  LoadResult b = run({"-c", bad}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  CHECK_FALSE(b.ok());
  CHECK(contains(b.errors, "trusted-proxies"));
  CHECK(contains(b.errors, "\"nope\" is not an IP address"));
}

TEST_CASE("abuse settings: defaults, -proxy-protocol needs trusted proxies, a generated secret is warned about") {
  const LoadResult defaults = run({}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& d = okConfig(defaults);
  CHECK_FALSE(d.proxy_protocol);
  CHECK(d.max_tickets_per_client == 0);
  CHECK(d.abuse_threshold == 0);
  CHECK(d.abuse_ban == 600'000);
  CHECK(d.abuse_allow.empty());

  const LoadResult set = run({"-proxy-protocol", "-trusted-proxies", "10.0.0.0/8", "-max-tickets-per-client", "5",
                              "-abuse-threshold=20", "-abuse-ban", "90s", "-abuse-allow", "192.0.2.0/24"},
                             {{"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& c = okConfig(set);
  CHECK(c.proxy_protocol);
  CHECK(c.max_tickets_per_client == 5);
  CHECK(c.abuse_threshold == 20);
  CHECK(c.abuse_ban == 90'000);
  CHECK(cidrListText(c.abuse_allow) == "192.0.2.0/24");

  LoadResult lonely = run({"-proxy-protocol"}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  CHECK_FALSE(lonely.ok());
  CHECK(contains(lonely.errors, "-proxy-protocol (flag): needs -trusted-proxies"));

  LoadResult short_ban = run({"-abuse-ban", "10ms"}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  CHECK_FALSE(short_ban.ok());
  CHECK(contains(short_ban.errors, "-abuse-ban (flag)"));
  LoadResult negative = run({}, {{"CONCERT_ADMIT_SECRET", kSecret}, {"CONCERT_MAX_TICKETS_PER_CLIENT", "-1"}});
  CHECK_FALSE(negative.ok());
  CHECK(contains(negative.errors, "CONCERT_MAX_TICKETS_PER_CLIENT"));

  LoadResult generated = run({"-abuse-threshold", "10"}, {});
  CHECK(generated.ok());
  CHECK(contains(generated.warnings, "-abuse-threshold (flag): CONCERT_ADMIT_SECRET is generated"));
}
