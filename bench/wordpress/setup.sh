#!/usr/bin/env bash
# A real origin for Concert's benchmarks: WordPress (Debian's package) on its own php-fpm
# master, its own nginx and its own MariaDB, all on 127.0.0.1 and under one state directory.
#
#   bash bench/wordpress/setup.sh [-n MAX_CHILDREN] [-p PORT] [-d STATE_DIR]
#
#   -n  php-fpm's pm.max_children (pm = static), default 4 (env WP_CHILDREN)
#   -p  nginx's port on 127.0.0.1, default 8380 (env WP_PORT)
#   -d  state directory, default /tmp/concert-wp (env WP_STATE)
#   WP_EXTRA_PACKAGES (env): more Debian packages to install if missing (run.sh: haproxy)
#
# What it does, each step skipped when already done (so running it again is quick and changes
# nothing but what differs, e.g. a new -n restarts php-fpm only):
#   * installs what is missing of mariadb-server php8.2-fpm php8.2-mysql wordpress
#     wordpress-theme-twentytwentythree nginx-light with apt-get (apt-get update first), without
#     recommends, with service starts denied by a temporary /usr/sbin/policy-rc.d if there is none
#     (the packages' own system services are never started);
#   * MariaDB: mariadb-install-db into STATE/db/data, mariadbd as user mysql with
#     --skip-networking and its socket STATE/db/mysqld.sock; database and user "wordpress";
#   * php-fpm 8.2: its own master (STATE/php-fpm.conf), one pool running as www-data, pm = static,
#     pm.max_children = N, listen STATE/php-fpm.sock with backlog 4096, pm.status_path /fpm-status;
#   * nginx: STATE/nginx/nginx.conf, listen 127.0.0.1:PORT backlog=4096, root /usr/share/wordpress,
#     PHP to the pool, stub_status on /nginx-status, php-fpm's status on /fpm-status (both
#     127.0.0.1 only);
#   * WordPress: /etc/wordpress/config-127.0.0.1.php (Debian's wordpress picks its config by the
#     Host header without the port; WP_HOME follows the Host header, so the site answers through
#     any proxy port without redirecting; no WP-cron, no outgoing HTTP), installed through
#     wp-admin/install.php?step=2, theme twentytwentythree, 12 posts of a few paragraphs each;
#   * a few warm-up requests; prints the URL and the pids.
#
# Logs: STATE/log/. Stop with bash bench/wordpress/stop.sh [--purge]. Needs root.
set -euo pipefail

CHILDREN=${WP_CHILDREN:-4}
PORT=${WP_PORT:-8380}
STATE=${WP_STATE:-/tmp/concert-wp}
while getopts "n:p:d:h" opt; do
  case "$opt" in
    n) CHILDREN=$OPTARG ;;
    p) PORT=$OPTARG ;;
    d) STATE=$OPTARG ;;
    *) sed -n '2,32p' "$0"; exit 2 ;;
  esac
done
case "$CHILDREN" in ''|*[!0-9]*) echo "setup.sh: -n wants a number" >&2; exit 2 ;; esac
case "$PORT" in ''|*[!0-9]*) echo "setup.sh: -p wants a number" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root" >&2; exit 1; }
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)

HOSTNAME_WP=127.0.0.1
WPCONF=/etc/wordpress/config-$HOSTNAME_WP.php
MARK="written by concert bench/wordpress/setup.sh"
DB=$STATE/db
SOCK=$DB/mysqld.sock
FPM_SOCK=$STATE/php-fpm.sock
NGX=$STATE/nginx
LOG=$STATE/log
URL="http://127.0.0.1:$PORT/"
T0=$(date +%s.%N)

mkdir -p "$LOG"
SETUP_LOG=$LOG/setup.log
: >"$SETUP_LOG"
say() { echo "setup.sh: $*"; }
fail() { echo "setup.sh: $*" >&2; echo "setup.sh: see $SETUP_LOG and $LOG/" >&2; exit 1; }
# Runs a command with its output in the setup log.
quiet() { "$@" >>"$SETUP_LOG" 2>&1; }

# shellcheck source=bench/stack.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stack.sh"

# ------------------------------------------------------------------ packages
PKGS="mariadb-server php8.2-fpm php8.2-mysql wordpress wordpress-theme-twentytwentythree nginx-light ${WP_EXTRA_PACKAGES:-}"
# shellcheck disable=SC2086  # the package names, one word each
install_missing $PKGS
T_PKG=$(date +%s.%N)

# ------------------------------------------------------------------ MariaDB
chmod 755 "$STATE"
mkdir -p "$DB"
chown mysql:mysql "$DB"
chmod 755 "$DB"
if [ ! -d "$DB/data/mysql" ]; then
  rm -rf "$DB/data"
  quiet timeout 300 mariadb-install-db --no-defaults --user=mysql --datadir="$DB/data" \
    --auth-root-authentication-method=socket --skip-test-db || fail "mariadb-install-db failed"
fi
MYSQL=(mariadb --no-defaults --socket="$SOCK" -uroot)
if ! DB_PID=$(live_pid "$DB/mariadbd.pid" "$DB/data"); then
  rm -f "$SOCK" "$DB/mariadbd.pid"
  setsid mariadbd --no-defaults --user=mysql --datadir="$DB/data" --socket="$SOCK" \
    --pid-file="$DB/mariadbd.pid" --skip-networking --log-error="$DB/error.log" \
    --innodb-buffer-pool-size=128M --max-connections=500 --skip-name-resolve \
    </dev/null >>"$LOG/mariadbd.out" 2>&1 &
  wait_for 60 "${MYSQL[@]}" -e 'SELECT 1' || fail "mariadbd did not answer on $SOCK within 60 s"
  DB_PID=$(live_pid "$DB/mariadbd.pid" "$DB/data") || fail "mariadbd wrote no pid file"
fi
if [ ! -s "$STATE/db-password" ]; then
  (umask 077; head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$STATE/db-password")
fi
DBPW=$(cat "$STATE/db-password")
quiet "${MYSQL[@]}" -e "CREATE DATABASE IF NOT EXISTS wordpress DEFAULT CHARACTER SET utf8mb4;
  CREATE USER IF NOT EXISTS 'wordpress'@'localhost' IDENTIFIED BY '$DBPW';
  ALTER USER 'wordpress'@'localhost' IDENTIFIED BY '$DBPW';
  GRANT ALL PRIVILEGES ON wordpress.* TO 'wordpress'@'localhost';" || fail "creating the database failed"

# ------------------------------------------------------------------ WordPress config
if [ -e "$WPCONF" ] && ! grep -qF "$MARK" "$WPCONF"; then
  fail "$WPCONF exists and was not written by this script; move it away first"
fi
if [ ! -s "$STATE/wp-salt" ]; then
  (umask 077; for i in 1 2 3 4 5 6 7 8; do head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9'; echo; done >"$STATE/wp-salt")
fi
mapfile -t SALT <"$STATE/wp-salt"
NEWCONF=$(cat <<EOF
<?php
/* $MARK for the stack in $STATE; removed by stop.sh --purge. */
define('DB_NAME', 'wordpress');
define('DB_USER', 'wordpress');
define('DB_PASSWORD', '$DBPW');
define('DB_HOST', 'localhost:$SOCK');
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
define('AUTH_KEY', '${SALT[0]}');
define('SECURE_AUTH_KEY', '${SALT[1]}');
define('LOGGED_IN_KEY', '${SALT[2]}');
define('NONCE_KEY', '${SALT[3]}');
define('AUTH_SALT', '${SALT[4]}');
define('SECURE_AUTH_SALT', '${SALT[5]}');
define('LOGGED_IN_SALT', '${SALT[6]}');
define('NONCE_SALT', '${SALT[7]}');
\$table_prefix = 'wp_';
/* The site answers under whatever host:port it is asked for (nginx directly, or a proxy in
   front), so WordPress never redirects a proxied visitor to nginx's port. */
\$concert_host = isset(\$_SERVER['HTTP_HOST']) && preg_match('/^[A-Za-z0-9.:\\[\\]-]+\$/', \$_SERVER['HTTP_HOST'])
    ? \$_SERVER['HTTP_HOST'] : '127.0.0.1:$PORT';
define('WP_HOME', 'http://' . \$concert_host);
define('WP_SITEURL', 'http://' . \$concert_host);
/* Nothing leaves 127.0.0.1: no WP-cron loopback requests, no update checks or other outgoing HTTP. */
define('DISABLE_WP_CRON', true);
define('WP_HTTP_BLOCK_EXTERNAL', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_DEBUG', false);
define('WP_CONTENT_DIR', '/var/lib/wordpress/wp-content');
EOF
)
if [ ! -e "$WPCONF" ] || [ "$(cat "$WPCONF")" != "$NEWCONF" ]; then
  mkdir -p /etc/wordpress
  printf '%s\n' "$NEWCONF" >"$WPCONF.tmp"
  chown root:www-data "$WPCONF.tmp"
  chmod 640 "$WPCONF.tmp"
  mv "$WPCONF.tmp" "$WPCONF"
fi

# ------------------------------------------------------------------ php-fpm
FPM_CONF=$STATE/php-fpm.conf
NEWFPM=$(cat <<EOF
; $MARK
[global]
pid = $STATE/php-fpm.pid
error_log = $LOG/php-fpm.log
daemonize = yes
process_control_timeout = 10s

[wordpress]
user = www-data
group = www-data
listen = $FPM_SOCK
listen.owner = www-data
listen.group = www-data
listen.mode = 0660
listen.backlog = 4096
pm = static
pm.max_children = $CHILDREN
pm.max_requests = 0
pm.status_path = /fpm-status
ping.path = /fpm-ping
request_terminate_timeout = 0
catch_workers_output = yes
php_admin_value[error_log] = $LOG/php-errors.log
php_admin_flag[log_errors] = on
EOF
)
FPM_PID=$(config_pid "$STATE/php-fpm.pid" "$FPM_CONF" "$NEWFPM") || exit 1
if [ -z "$FPM_PID" ]; then
  rm -f "$FPM_SOCK" "$STATE/php-fpm.pid"
  touch "$LOG/php-errors.log"
  chown www-data:www-data "$LOG/php-errors.log"
  quiet timeout 30 php-fpm8.2 --fpm-config "$FPM_CONF" || fail "php-fpm8.2 did not start"
  wait_for 20 test -S "$FPM_SOCK" || fail "php-fpm's socket $FPM_SOCK did not appear"
  FPM_PID=$(live_pid "$STATE/php-fpm.pid" "$FPM_CONF") || fail "php-fpm wrote no pid file"
fi

# ------------------------------------------------------------------ nginx
mkdir -p "$NGX"/{client_body,proxy,fastcgi,uwsgi,scgi}
chown -R www-data:www-data "$NGX"/{client_body,proxy,fastcgi,uwsgi,scgi}
NGX_CONF=$NGX/nginx.conf
NEWNGX=$(cat <<EOF
# $MARK
user www-data;
worker_processes auto;
worker_rlimit_nofile 20000;
pid $NGX/nginx.pid;
error_log $LOG/nginx-error.log warn;
events { worker_connections 8000; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log off;
  client_body_temp_path $NGX/client_body;
  proxy_temp_path $NGX/proxy;
  fastcgi_temp_path $NGX/fastcgi;
  uwsgi_temp_path $NGX/uwsgi;
  scgi_temp_path $NGX/scgi;
  keepalive_timeout 120s;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:$PORT backlog=4096;
    server_name _;
    root /usr/share/wordpress;
    index index.php;
    location = /nginx-status { stub_status; allow 127.0.0.1; deny all; }
    location ~ ^/fpm-(status|ping)\$ {
      allow 127.0.0.1; deny all;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass unix:$FPM_SOCK;
    }
    location / { try_files \$uri \$uri/ /index.php?\$args; }
    location ~ ^/wp-content/(.*)\$ { alias /var/lib/wordpress/wp-content/\$1; }
    location ~ \.php\$ {
      try_files \$uri =404;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass unix:$FPM_SOCK;
      fastcgi_connect_timeout 60s;
      fastcgi_send_timeout 600s;
      fastcgi_read_timeout 600s;
    }
  }
}
EOF
)
NGX_PID=$(config_pid "$NGX/nginx.pid" "$NGX_CONF" "$NEWNGX") || exit 1
[ -n "$NGX_PID" ] || NGX_PID=$(start_nginx "$NGX" "$NGX_CONF" "$LOG" "$PORT") || exit 1

# ------------------------------------------------------------------ WordPress install
sql() { "${MYSQL[@]}" -N -B wordpress -e "$1"; }
if ! sql "SELECT option_value FROM wp_options WHERE option_name='siteurl'" 2>/dev/null | grep -q .; then
  ADMINPW=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  (umask 077; echo "$ADMINPW" >"$STATE/wp-admin-password")
  out=$(curl -sS --max-time 180 -H "Host: 127.0.0.1:$PORT" "${URL}wp-admin/install.php?step=2" \
    --data-urlencode "weblog_title=Concert bench blog" --data-urlencode "user_name=admin" \
    --data-urlencode "admin_password=$ADMINPW" --data-urlencode "admin_password2=$ADMINPW" \
    --data-urlencode "pw_weak=on" --data-urlencode "admin_email=admin@example.invalid" \
    --data-urlencode "blog_public=0" --data-urlencode "language=" 2>>"$SETUP_LOG") || fail "the install request failed"
  printf '%s\n' "$out" >"$LOG/install.html"
  sql "SELECT option_value FROM wp_options WHERE option_name='siteurl'" | grep -q . \
    || fail "WordPress did not install (answer in $LOG/install.html)"
fi
sql "UPDATE wp_options SET option_value='twentytwentythree' WHERE option_name IN ('template','stylesheet');
     UPDATE wp_options SET option_value='Twenty Twenty-Three' WHERE option_name='current_theme';" \
  || fail "setting the theme failed"

# A dozen posts with a few paragraphs, a list and a quote each (block markup), in "Uncategorized".
have=$(sql "SELECT COUNT(*) FROM wp_posts WHERE post_name LIKE 'concert-bench-%'")
if [ "${have:-0}" -lt 12 ]; then
  PARA='Sed ut perspiciatis unde omnis iste natus error sit voluptatem accusantium doloremque laudantium, totam rem aperiam, eaque ipsa quae ab illo inventore veritatis et quasi architecto beatae vitae dicta sunt explicabo. Nemo enim ipsam voluptatem quia voluptas sit aspernatur aut odit aut fugit, sed quia consequuntur magni dolores eos qui ratione voluptatem sequi nesciunt.'
  body=""
  for k in 1 2 3 4; do
    body="$body<!-- wp:paragraph --><p>$PARA</p><!-- /wp:paragraph -->"
    [ "$k" = 2 ] && body="$body<!-- wp:list --><ul><li>Doors open at seven</li><li>One ticket per visitor</li><li>The line is first come, first served</li></ul><!-- /wp:list -->"
    [ "$k" = 3 ] && body="$body<!-- wp:quote --><blockquote class=\"wp-block-quote\"><p>Everybody waits their turn.</p></blockquote><!-- /wp:quote -->"
  done
  q="DELETE p, r FROM wp_posts p LEFT JOIN wp_term_relationships r ON r.object_id = p.ID WHERE p.post_name LIKE 'concert-bench-%';"
  for i in $(seq 1 12); do
    q="$q INSERT INTO wp_posts (post_author, post_date, post_date_gmt, post_content, post_title, post_excerpt,
         post_status, comment_status, ping_status, post_name, to_ping, pinged, post_modified, post_modified_gmt,
         post_content_filtered, post_parent, guid, menu_order, post_type, comment_count)
       VALUES (1, NOW() - INTERVAL $i HOUR, UTC_TIMESTAMP() - INTERVAL $i HOUR, '$body', 'Concert night $i: notes from the line', '',
         'publish', 'open', 'open', 'concert-bench-$i', '', '', NOW(), UTC_TIMESTAMP(), '', 0, '', 0, 'post', 0);
       UPDATE wp_posts SET guid = CONCAT('${URL}?p=', ID) WHERE ID = LAST_INSERT_ID();
       INSERT INTO wp_term_relationships (object_id, term_taxonomy_id, term_order) VALUES (LAST_INSERT_ID(), 1, 0);"
  done
  q="$q UPDATE wp_term_taxonomy t SET count = (SELECT COUNT(*) FROM wp_term_relationships r JOIN wp_posts p
       ON p.ID = r.object_id AND p.post_status = 'publish' WHERE r.term_taxonomy_id = t.term_taxonomy_id) WHERE t.term_taxonomy_id = 1;"
  sql "$q" || fail "adding the posts failed"
fi

# ------------------------------------------------------------------ check and warm up
page=$(curl -sS --max-time 60 -o "$LOG/front.html" -w '%{http_code} %{size_download}' "$URL" 2>>"$SETUP_LOG") \
  || fail "GET $URL failed"
case "$page" in 200\ *) ;; *) fail "GET $URL answered $page (body in $LOG/front.html)" ;; esac
grep -q 'twentytwentythree' "$LOG/front.html" || fail "the front page does not use twentytwentythree ($LOG/front.html)"
grep -q 'Concert night 1:' "$LOG/front.html" || fail "the front page does not list the posts ($LOG/front.html)"
for _ in 1 2 3 4 5; do curl -sS --max-time 60 -o /dev/null "$URL" 2>>"$SETUP_LOG" || true; done

T1=$(date +%s.%N)
printf 'setup.sh: WordPress at %s (front page %s bytes), php-fpm max_children=%s, state %s\n' \
  "$URL" "${page#* }" "$CHILDREN" "$STATE"
printf 'setup.sh: pids: nginx %s, php-fpm %s, mariadbd %s; took %.1f s (packages %.1f s)\n' \
  "$NGX_PID" "$FPM_PID" "$DB_PID" "$(awk "BEGIN{print $T1 - $T0}")" "$(awk "BEGIN{print $T_PKG - $T0}")"
