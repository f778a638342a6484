# ruff: noqa: E501  (HTML and CSS lines; wrapping them would only hurt reading)
"""The console's HTML: Jinja2 templates kept as strings (one package, no data files),
rendered with autoescaping on. The layout carries the CSS; the group page carries the
only script, the live lag chart (inline SVG, no library, no CDN)."""

from __future__ import annotations

from typing import Any

import jinja2

from tidemq.console.model import human_bytes, uptime, when
from tidemq.console.templates_dlq import DLQ, DLQ_LIST, DLQ_RESEND

__all__ = ["render"]

LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{{ title }}{% endblock %} · TideMQ console</title>
{% if csrf_token %}<meta name="csrf-token" content="{{ csrf_token }}">{% endif %}
<style>
:root { --ink:#1d2433; --muted:#667085; --line:#e4e7ec; --bg:#f6f7f9; --brand:#0b6bcb;
        --ok:#12805c; --warn:#b54708; --bad:#b42318; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color:var(--ink); background:var(--bg); }
header { background:#0f1b2d; color:#fff; display:flex; align-items:center; gap:28px;
         padding:0 24px; height:52px; }
header .logo { font-weight:700; font-size:17px; letter-spacing:.3px; }
header .logo span { color:#5cc8ff; }
header nav a { color:#c9d3e3; text-decoration:none; margin-right:18px; padding:15px 0; }
header nav a.on, header nav a:hover { color:#fff; border-bottom:2px solid #5cc8ff; }
header .ns { margin-left:auto; color:#9fb0c8; font-size:12px; }
main { padding:20px 24px 40px; overflow-x:auto; }
h1 { font-size:20px; margin:4px 0 16px; }
h2 { font-size:16px; margin:26px 0 10px; }
.cards { display:flex; gap:14px; flex-wrap:wrap; margin-bottom:18px; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 16px;
        min-width:150px; }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.4px; }
.card .v { font-size:22px; font-weight:600; margin-top:2px; }
table { border-collapse:collapse; width:100%; background:#fff; border:1px solid var(--line);
        border-radius:8px; overflow:hidden; }
th, td { text-align:left; padding:7px 10px; border-bottom:1px solid var(--line);
         white-space:nowrap; }
th { background:#f0f2f5; font-weight:600; font-size:12px; color:#344054; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tr:last-child td { border-bottom:none; }
a { color:var(--brand); }
th a { color:inherit; text-decoration:none; } th.sorted a { color:var(--brand); }
.legend { font-size:12px; font-weight:400; color:var(--muted); margin-left:10px; }
.legend i { display:inline-block; width:12px; height:3px; vertical-align:middle; margin:0 4px 0 8px; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px;
         background:#eef4ff; color:#3538cd; }
.badge.ok { background:#ecfdf3; color:var(--ok); } .badge.bad { background:#fef3f2;
         color:var(--bad); } .badge.warn { background:#fffaeb; color:var(--warn); }
.bar { width:80px; height:8px; background:#eaecf0; border-radius:4px; display:inline-block;
       vertical-align:middle; margin-right:6px; }
.bar i { display:block; height:100%; border-radius:4px; background:var(--ok); }
.bar i.warn { background:#f79009; } .bar i.bad { background:var(--bad); }
.flash { padding:10px 14px; border-radius:6px; margin-bottom:16px; background:#ecfdf3;
         border:1px solid #abefc6; }
.error { padding:10px 14px; border-radius:6px; margin-bottom:16px; background:#fef3f2;
         border:1px solid #fecdca; color:var(--bad); }
.empty { padding:28px; text-align:center; background:#fff; border:1px dashed #d0d5dd;
         border-radius:8px; color:var(--muted); }
.empty b { color:var(--ink); display:block; font-size:15px; margin-bottom:4px; }
form.inline { display:flex; gap:10px; align-items:flex-end; flex-wrap:wrap; background:#fff;
              border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
form.inline label { display:flex; flex-direction:column; font-size:12px; color:#344054; gap:3px; }
input, select, textarea { font:inherit; padding:5px 8px; border:1px solid #d0d5dd;
                          border-radius:6px; background:#fff; }
button { font:inherit; padding:6px 14px; border-radius:6px; border:1px solid var(--brand);
         background:var(--brand); color:#fff; cursor:pointer; }
button.danger { background:var(--bad); border-color:var(--bad); }
button.ghost, a.ghost { background:#fff; color:var(--ink); border:1px solid #d0d5dd;
                        padding:6px 14px; border-radius:6px; text-decoration:none; }
pre.body { background:#0f1b2d; color:#e6edf7; padding:12px; border-radius:6px;
           white-space:pre-wrap; word-break:break-all; max-height:360px; overflow:auto; }
.muted { color:var(--muted); } .row { display:flex; gap:16px; flex-wrap:wrap; }
.grow { flex:1 1 420px; } dl.kv { display:grid; grid-template-columns:max-content auto;
        gap:4px 18px; background:#fff; border:1px solid var(--line); border-radius:8px;
        padding:12px 16px; margin:0; } dl.kv dt { color:var(--muted); } dl.kv dd { margin:0; }
fieldset.controls { display:contents; }
fieldset.controls:disabled button, fieldset.controls:disabled input, fieldset.controls:disabled select,
fieldset.controls:disabled textarea, .ghost.disabled { opacity:.45; cursor:not-allowed; }
header .who { color:#c9d3e3; font-size:12px; display:flex; gap:10px; align-items:center; }
header .who button { padding:3px 10px; font-size:12px; background:transparent; border-color:#5cc8ff; }
.readonly { padding:8px 14px; border-radius:6px; margin-bottom:16px; background:#fffaeb;
            border:1px solid #fedf89; color:var(--warn); }
form.login { max-width:340px; margin:60px auto; background:#fff; border:1px solid var(--line);
             border-radius:8px; padding:22px 24px; display:flex; flex-direction:column; gap:12px; }
form.login label { display:flex; flex-direction:column; gap:4px; font-size:13px; }
.chart { background:#fff; border:1px solid var(--line); border-radius:8px; width:100%; }
</style></head>
<body>
<header><div class="logo">Tide<span>MQ</span></div>
{% if user %}<nav>{% for href, label in nav %}<a href="{{ href }}"
  class="{{ 'on' if active == href else '' }}">{{ label }}</a>{% endfor %}</nav>{% endif %}
<div class="ns">{% if user %}name server {{ namesrv }}{% endif %}</div>
{% if user and logins %}<form class="who" method="post" action="/logout" id="logout">{{ csrf_field }}
<span id="user">{{ user.name }}</span> <span class="badge" id="role">{{ user.role.value }}</span>
<button type="submit">Log out</button></form>{% endif %}</header>
<main>
{% if readonly %}<div class="readonly" id="readonly">You are logged in as a viewer: you can look, not change.</div>{% endif %}
{% if flash %}<div class="flash" id="flash">{{ flash }}</div>{% endif %}
{% if error %}<div class="error" id="error">{{ error }}</div>{% endif %}
{% if unanswered %}<div class="error" id="unanswered"><b>Not every broker answered within {{ deadline }} s.</b>
This page shows what the others answered, and leaves out:
<ul>{% for name, addr, why in unanswered %}<li data-broker="{{ addr }}">{{ name }} at {{ addr }} ({{ why }})</li>{% endfor %}</ul></div>{% endif %}
{% block content %}{% endblock %}
</main></body></html>
"""

CLUSTER = """{% extends "layout" %}{% block content %}
<h1>Cluster</h1>
<div class="cards">
 <div class="card"><div class="k">Clusters</div><div class="v">{{ clusters|length }}</div></div>
 <div class="card"><div class="k">Brokers</div><div class="v" id="broker-count">{{ brokers|length }}</div></div>
 <div class="card"><div class="k">Topics</div><div class="v" id="topic-count-card"><a href="/topics">{{ topic_count }}</a></div></div>
 <div class="card"><div class="k">Put TPS</div><div class="v">{{ '%.1f'|format(put_tps) }}</div></div>
 <div class="card"><div class="k">Get TPS</div><div class="v">{{ '%.1f'|format(get_tps) }}</div></div>
 <div class="card"><div class="k">Max dispatch lag</div><div class="v">{{ max_lag_ms }} ms</div></div>
</div>
<h2>Brokers</h2>
{% if brokers %}
<table id="brokers"><thead><tr><th>Cluster</th><th>Broker</th><th class="num">Id</th><th>Address</th>
<th>Status</th><th>Disk used</th><th class="num">Put TPS</th><th class="num">Get TPS</th>
<th class="num">Dispatch behind</th><th class="num">Dispatch lag</th><th class="num">Connections</th>
<th class="num">Topics</th><th>Up</th></tr></thead><tbody>
{% for b in brokers %}<tr>
<td>{{ b.cluster }}</td><td><a href="/brokers/{{ b.address }}">{{ b.broker_name }}</a></td>
<td class="num">{{ b.broker_id }}{% if b.broker_id == 0 %} <span class="badge">master</span>{% endif %}</td>
<td>{{ b.address }}</td>
<td>{% if b.error %}<span class="badge bad" title="{{ b.error }}">unreachable</span>
{% elif b.s.storeStatus == 'RUNNING' %}<span class="badge ok">RUNNING</span>
{% else %}<span class="badge warn">{{ b.s.storeStatus }}</span>{% endif %}</td>
<td>{% set r = (b.s.commitLogDiskRatio or 0)|float %}<span class="bar"><i class="{{ 'bad' if r > 0.9 else ('warn' if r > 0.75 else '') }}"
 style="width:{{ (r * 100)|round(1) }}%"></i></span>{{ (r * 100)|round(1) }}%</td>
<td class="num">{{ b.s.putTps or '-' }}</td><td class="num">{{ b.s.getTransferedTps or '-' }}</td>
<td class="num">{{ hb(b.s.dispatchBehindBytes|int) if b.s.dispatchBehindBytes else '-' }}</td>
<td class="num">{{ b.s.dispatchLagMs or '-' }} ms</td>
<td class="num">{{ b.s.connectionCount or '-' }}</td><td class="num">{{ b.s.topicCount or '-' }}</td>
<td class="muted" title="{{ b.s.runtime }}">{{ uptime(b.s.bootTimestamp) }}</td></tr>{% endfor %}
</tbody></table>
{% else %}<div class="empty"><b>No brokers registered</b>The name server knows no broker yet.
Start one with <code>tidemq broker --set namesrvAddr={{ namesrv }}</code>.</div>{% endif %}
{% if groups|selectattr('replicas')|list or groups|rejectattr('master')|list %}
<h2>Replication</h2>
<table id="replication"><thead><tr><th>Cluster</th><th>Broker group</th><th>Master</th>
<th>Replica</th><th class="num">Id</th><th>State</th><th class="num">Behind</th>
<th class="num">Behind (s)</th></tr></thead><tbody>
{% for g in groups %}{% for r in (g.replicas or [none]) %}<tr data-group="{{ g.name }}"{% if r %} data-replica="{{ r.broker_id }}"{% endif %}>
<td>{{ g.cluster }}</td><td>{{ g.name }}</td>
<td class="master">{% if g.master %}{{ g.master }}{% else %}<span class="badge bad">no master</span>{% endif %}</td>
{% if r %}<td>{{ r.address }}</td><td class="num">{{ r.broker_id }}</td>
<td class="state">{% if not r.connected %}<span class="badge warn">not copying</span>
{% elif r.in_sync %}<span class="badge ok">in sync</span>{% else %}<span class="badge bad">out of sync</span>{% endif %}</td>
<td class="num lag-bytes">{{ hb(r.lag_bytes) if r.connected else '-' }}</td>
<td class="num lag-seconds">{{ '%.1f'|format(r.lag_ms / 1000) if r.connected and r.lag_ms >= 0 else '-' }}</td>
{% else %}<td class="muted" colspan="5">no replica</td>{% endif %}</tr>{% endfor %}{% endfor %}
</tbody></table>
<p class="muted" id="in-sync">{% for g in groups %}{{ g.name }}: {{ g.in_sync + (1 if g.master else 0) }} of {{ g.replicas|length + (1 if g.master else 0) }} in sync{% if not loop.last %}; {% endif %}{% endfor %}</p>
{% endif %}
{% endblock %}"""

BROKER = """{% extends "layout" %}{% block content %}
<h1>Broker {{ status.brokerName or address }} <span class="muted">{{ address }}</span></h1>
<p><a href="/brokers/{{ address|urlencode }}/config" id="broker-config-link">Configuration</a></p>
<dl class="kv" id="broker-status">{% for k, v in status.items() %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
{% endblock %}"""

BROKER_CONFIG = """{% extends "layout" %}{% block content %}
<h1>Broker {{ address }}: configuration</h1>
<h2>Change a key</h2>
<form class="inline" method="post" action="/brokers/{{ address|urlencode }}/config" id="config-form">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <label>Key <input name="key" list="config-keys" required value="{{ key }}" style="width:260px"></label>
 <label>Value <input name="value" style="width:200px" value="{{ config.get(key, '') }}"></label>
 <button type="submit">Change…</button></fieldset></form>
<datalist id="config-keys">{% for k in config %}<option value="{{ k }}">{% endfor %}</datalist>
<p class="muted">Only some keys change while a broker runs (for example <code>brokerPermission</code>,
<code>autoCreateTopicEnable</code>, <code>autoCreateSubscriptionGroup</code>); the broker refuses the
others, and this page shows its answer. The broker keeps a change across restarts.</p>
<h2>{{ config|length }} keys</h2>
<table id="broker-config"><thead><tr><th>Key</th><th>Value</th><th></th></tr></thead><tbody>
{% for k, v in config.items() %}<tr data-key="{{ k }}"><td>{{ k }}</td><td class="value">{{ v }}</td>
<td>{% if not readonly %}<a href="?key={{ k|urlencode }}#config-form">change…</a>{% endif %}</td></tr>{% endfor %}
</tbody></table>
{% endblock %}"""

TOPICS = """{% extends "layout" %}{% block content %}
<h1>Topics</h1>
<h2>Create or update a topic</h2>
<form class="inline" method="post" action="/topics" id="create-topic">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <label>Topic <input name="topic" required pattern="[%|a-zA-Z0-9_-]+" maxlength="127" placeholder="Orders"></label>
 <label>Read queues <input name="read_queues" type="number" min="1" max="1024" value="8" style="width:90px"></label>
 <label>Write queues <input name="write_queues" type="number" min="1" max="1024" value="8" style="width:90px"></label>
 <label>Permission <select name="perm"><option value="6">read + write</option>
   <option value="4">read only</option><option value="2">write only</option></select></label>
 <label>Queue type <select name="queue_type"><option>SimpleCQ</option><option>BatchCQ</option></select></label>
 <label>Order <select name="order"><option value="false">no</option><option value="true">yes</option></select></label>
 <label>Cluster <select name="cluster"><option value="">all clusters</option>
   {% for c in clusters %}<option>{{ c }}</option>{% endfor %}</select></label>
 <button type="submit">Create / update</button>
</fieldset></form>
<h2 id="topic-count">{{ listing.total }} topic{{ '' if listing.total == 1 else 's' }}{% if listing.query %} matching {{ listing.query }}{% endif %} {% if show_system %}<a class="muted" href="/topics">hide system topics</a>
{% else %}<a class="muted" href="/topics?system=1">show system topics</a>{% endif %}</h2>
{% include "list-filter" %}
{% if unread %}<div class="error" id="unread-brokers"><b>Not every broker could be read.</b>
The topics below miss what these brokers hold (their queues, or topics only they have):
<ul>{% for name, why in unread %}<li data-broker="{{ name }}">{{ name }} ({{ why }})</li>{% endfor %}</ul></div>{% endif %}
{% if topics %}
<table id="topics"><thead><tr><th>Topic</th><th>Queue type</th><th>Logical</th><th class="num">Read / write queues</th>
<th>Brokers</th><th>Perm</th><th class="num">Messages</th><th class="num">Put TPS</th></tr></thead><tbody>
{% for t in topics %}<tr data-topic="{{ t.name }}"><td><a href="/topics/{{ t.name|urlencode }}">{{ t.name }}</a>
{% if t.system %} <span class="badge">system</span>{% endif %}</td>
<td><span class="badge {{ 'warn' if t.queue_type == 'BatchCQ' else '' }}">{{ t.queue_type }}</span></td>
<td>{{ 'yes' if t.logical else 'no' }}</td>
<td class="num">{{ t.read_queues }} / {{ t.write_queues }}</td><td>{{ t.brokers|join(', ') }}</td>
<td>{{ t.perm }}</td><td class="num">{{ t.messages if t.messages is not none else '-' }}</td>
<td class="num">{{ '%.1f'|format(t.put_tps) if t.put_tps is not none else '-' }}</td></tr>{% endfor %}
</tbody></table>
{% include "list-pager" %}
{% elif listing.query %}<div class="empty" id="no-match"><b>No topic matches {{ listing.query }}</b>{{ listing.listed }} listed in all.</div>
{% elif no_brokers %}{% include "no-brokers" %}
{% else %}<div class="empty"><b>No topics yet</b>Create one with the form above.</div>{% endif %}
{% endblock %}"""

TOPIC = """{% extends "layout" %}{% block content %}
<h1>Topic {{ topic }}</h1>
<div class="cards">
 <div class="card"><div class="k">Queue type</div><div class="v" id="queue-type">{{ queue_type }}</div></div>
 <div class="card"><div class="k">Logical queues</div><div class="v">{{ 'yes' if logical else 'no' }}</div></div>
 <div class="card"><div class="k">Queues</div><div class="v">{{ stats.queues|length }}</div></div>
 <div class="card"><div class="k">Messages stored</div><div class="v" id="message-count">{{ stats.messages }}</div></div>
 <div class="card"><div class="k">Put TPS</div><div class="v">{{ '%.1f'|format(stats.put_tps) }}</div></div>
</div>
<h2>Put and get rates <span class="muted" id="rate-note">(sampled every {{ rates.interval }} s, the last hour)</span>
 <span class="legend"><i style="background:#0b6bcb"></i>put <i style="background:#12805c"></i>get</span></h2>
<svg id="rate-chart" class="chart" viewBox="0 0 900 220" height="220"></svg>
<script>{{ chart_js|safe }}</script>
<script>
(function () {
  var url = {{ api_url|tojson }}, svg = document.getElementById("rate-chart");
  function draw(r) { chart(svg, [{points: r.put, color: "#0b6bcb"}, {points: r.get, color: "#12805c"}],
                           {title: "messages per second", integer: false,
                            empty: "No samples yet: a rate needs two samples, taken every " +
                                   {{ rates.interval|tojson }} + " s"}); }
  function poll() {
    fetch(url, {cache: "no-store"}).then(function (r) { return r.json(); }).then(draw)
      .catch(function (e) { document.getElementById("rate-note").textContent = "(update failed: " + e + ")"; });
  }
  draw({{ rates|tojson }});
  setInterval(poll, {{ (rates.interval * 1000)|int }});
})();
</script>
<div class="row"><div class="grow">
<h2>Queues</h2>
<table id="queues"><thead><tr><th>Broker</th><th class="num">Queue</th><th class="num">Min offset</th>
<th class="num">Max offset</th><th class="num">Messages</th><th>Last update</th><th></th></tr></thead><tbody>
{% for q in stats.queues %}<tr><td>{{ q.broker_name }}</td><td class="num">{{ q.queue_id }}</td>
<td class="num">{{ q.min_offset }}</td><td class="num">{{ q.max_offset }}</td>
<td class="num">{{ q.max_offset - q.min_offset }}</td><td>{{ when(q.last_update_time) }}</td>
<td>{% if q.max_offset > q.min_offset %}<a href="/messages?topic={{ topic|urlencode }}&broker={{ q.broker_name|urlencode }}&queue_id={{ q.queue_id }}&offset={{ q.max_offset - 1 }}">last message</a>{% endif %}</td></tr>
{% endfor %}</tbody></table>
<h2>Configuration</h2>
<table id="configs"><thead><tr><th>Broker</th><th class="num">Read</th><th class="num">Write</th><th>Perm</th><th>Order</th><th>Attributes</th></tr></thead><tbody>
{% for name, c in configs %}<tr><td>{{ name }}</td><td class="num">{{ c.read_queue_nums }}</td><td class="num">{{ c.write_queue_nums }}</td>
<td>{{ c.perm }}</td><td>{{ 'yes' if c.order else 'no' }}</td><td>{% for k, v in c.attributes.items() %}<span class="badge">{{ k }}={{ v }}</span> {% endfor %}</td></tr>
{% endfor %}</tbody></table>
<h2>Consumer groups</h2>
{% if groups %}<table id="topic-groups"><thead><tr><th>Group</th><th class="num">Lag on this topic</th><th class="num">Consume TPS</th><th class="num">Online consumers</th></tr></thead><tbody>
{% for g in groups %}<tr data-group="{{ g.name }}"><td><a href="/groups/{{ g.name|urlencode }}">{{ g.name }}</a></td>
<td class="num">{{ g.lag if g.lag is not none else '-' }}</td><td class="num">{{ '%.1f'|format(g.tps) if g.tps is not none else '-' }}</td>
<td class="num">{{ g.online if g.online is not none else '-' }}</td></tr>{% endfor %}</tbody></table>
{% else %}<p class="muted">No group has stored offsets of this topic or subscribes to it.</p>{% endif %}
<p><a href="/topics/{{ topic|urlencode }}/messages" id="messages-by-time">Messages by time…</a></p>
<h2>Consumers online</h2>
{% if consumers %}<table id="topic-consumers"><thead><tr><th>Group</th><th>Client id</th><th>Address</th><th>Language</th><th>Version</th></tr></thead><tbody>
{% for c in consumers %}<tr><td>{{ c.group }}</td><td>{{ c.clientId }}</td><td>{{ c.clientAddr }}</td><td>{{ c.language }}</td><td>{{ c.version_name }}</td></tr>{% endfor %}
</tbody></table>{% else %}<p class="muted">No consumer of this topic is connected.</p>{% endif %}
<h2>Producers</h2>
<form class="inline" method="get" action="/topics/{{ topic|urlencode }}" id="producer-form"><fieldset class="controls">
 <label>Producer group <input name="producer_group" required value="{{ producer_group }}" style="width:220px"></label>
 <button type="submit">Show connections</button></fieldset></form>
{% if producer_error %}<div class="error" id="producer-error">{{ producer_error }}</div>
{% elif producers %}<table id="topic-producers"><thead><tr><th>Client id</th><th>Address</th><th>Language</th><th>Version</th></tr></thead><tbody>
{% for c in producers %}<tr><td>{{ c.clientId }}</td><td>{{ c.clientAddr }}</td><td>{{ c.language }}</td><td>{{ c.version_name }}</td></tr>{% endfor %}
</tbody></table>{% elif producers is not none %}<p class="muted" id="no-producers">No producer of {{ producer_group }} is connected to this topic's brokers.</p>{% endif %}
</div><div class="grow">
<h2>Update</h2>
<form class="inline" method="post" action="/topics" id="update-topic">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <input type="hidden" name="topic" value="{{ topic }}"><input type="hidden" name="queue_type" value="{{ queue_type }}">
 <label>Read queues <input name="read_queues" type="number" min="1" max="1024" value="{{ read_queues }}" style="width:90px"></label>
 <label>Write queues <input name="write_queues" type="number" min="1" max="1024" value="{{ write_queues }}" style="width:90px"></label>
 <label>Permission <select name="perm">{% for v, l in [(6, 'read + write'), (4, 'read only'), (2, 'write only')] %}
  <option value="{{ v }}" {{ 'selected' if v == perm else '' }}>{{ l }}</option>{% endfor %}</select></label>
 <button type="submit">Update</button></fieldset></form>
<h2>Send a message</h2>
<form class="inline" method="post" action="/topics/{{ topic|urlencode }}/send" id="send-message">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <label>Tags <input name="tags" placeholder="TagA" style="width:110px"></label>
 <label>Keys <input name="keys" placeholder="order-1 order-2" style="width:160px"></label>
 <label style="flex:1 1 100%">Body <textarea name="body" rows="3" required></textarea></label>
 <button type="submit">Send</button></fieldset></form>
<h2>Danger zone</h2>
{% if readonly %}<span class="ghost disabled" id="delete-topic">Delete topic…</span>{% else %}<a class="ghost" href="/topics/{{ topic|urlencode }}/delete" id="delete-topic">Delete topic…</a>{% endif %}
</div></div>
{% endblock %}"""

TOPIC_MESSAGES = """{% extends "layout" %}{% block content %}
<h1>Messages of <a href="/topics/{{ topic|urlencode }}">{{ topic }}</a></h1>
<form class="inline" method="get" action="/topics/{{ topic|urlencode }}/messages" id="by-time"><fieldset class="controls">
 <label>Stored from (local) <input name="begin" type="datetime-local" step="1" value="{{ begin }}"></label>
 <label>to <input name="end" type="datetime-local" step="1" value="{{ end }}"></label>
 <button type="submit">Show</button></fieldset></form>
<h2 id="range-total">{{ total }} message{{ '' if total == 1 else 's' }} stored from {{ begin.replace('T', ' ') }} to {{ end.replace('T', ' ') }}</h2>
{% if rows %}
<table id="range-messages"><thead><tr><th>Message id</th><th>Queue</th><th class="num">Offset</th><th>Tags</th><th>Keys</th><th>Stored</th>
{% for g in groups %}<th>{{ g }}</th>{% endfor %}</tr></thead><tbody>
{% for r in rows %}<tr><td><a href="/messages?by=offset&topic={{ topic|urlencode }}&broker={{ r.broker_name|urlencode }}&queue_id={{ r.msg.queue_id }}&offset={{ r.msg.queue_offset }}">{{ r.msg.uniq_key or r.msg.msg_id }}</a></td>
<td>{{ r.broker_name }} / {{ r.msg.queue_id }}</td><td class="num">{{ r.msg.queue_offset }}</td><td>{{ r.msg.tags or '-' }}</td><td>{{ r.msg.keys|join(' ') or '-' }}</td>
<td>{{ when(r.msg.store_timestamp) }}</td>
{% for c in r.consumed %}<td class="{{ 'consumed' if c else 'pending' }}">{% if c %}<span class="badge ok">consumed</span>{% else %}<span class="badge warn">not consumed</span>{% endif %}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
<p class="pager" id="pager">Page {{ page }} of {{ pages }}
{% if page > 1 %}<a id="prev-page" href="?begin={{ begin|urlencode }}&end={{ end|urlencode }}&page={{ page - 1 }}">previous</a>{% endif %}
{% if page < pages %}<a id="next-page" href="?begin={{ begin|urlencode }}&end={{ end|urlencode }}&page={{ page + 1 }}">next</a>{% endif %}</p>
<p class="muted">Queue by queue, in offset order. A group has consumed a message when it has committed an offset past it.</p>
{% else %}<div class="empty"><b>No messages</b>Nothing of {{ topic }} was stored in that time{{ ' (or the page is past the end)' if total else '' }}.</div>{% endif %}
{% endblock %}"""

GROUP_FORM = """<form class="inline" method="post" action="/groups" id="{{ form_id }}">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
{% if name %}<input type="hidden" name="group" value="{{ name }}">{% else %}<label>Group <input name="group" required pattern="[%|a-zA-Z0-9_-]+" maxlength="255" placeholder="billing"></label>{% endif %}
{% for key, label, kind in fields %}{% if kind == 'bool' %}<label>{{ label }} <select name="{{ key }}"><option value="true"{{ ' selected' if values[key] }}>yes</option><option value="false"{{ '' if values[key] else ' selected' }}>no</option></select></label>
{% else %}<label>{{ label }} <input name="{{ key }}" type="number" min="{{ kind }}" value="{{ values[key] if values[key] is not none else '' }}" required style="width:90px"></label>
{% endif %}{% endfor %}
 <button type="submit">{{ button }}</button></fieldset></form>"""

NO_BROKERS = """<div class="empty" id="no-brokers"><b>No broker is registered with the name server</b>
The list comes from the master brokers, and none is registered now: a broker that stopped or lost its
connection is left out until it registers again. See the <a href="/cluster">cluster</a>.</div>"""

CONSUMER = """{% extends "layout" %}{% block content %}
<h1>Consumer {{ client_id }} <span class="muted">of <a href="{{ group_url }}">{{ group }}</a></span></h1>
<h2>Properties</h2>
<dl class="kv" id="consumer-properties">{% for k, v in properties.items() %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
<h2>Subscriptions</h2>
{% if subscriptions %}<table id="consumer-subscriptions"><thead><tr><th>Topic</th><th>Expression type</th><th>Expression</th><th class="num">Version</th></tr></thead><tbody>
{% for s in subscriptions %}<tr data-topic="{{ s.topic }}"><td>{{ s.topic }}</td><td>{{ s.expressionType }}</td><td>{{ s.subString }}</td><td class="num">{{ s.subVersion }}</td></tr>{% endfor %}
</tbody></table>{% else %}<p class="muted">It reports no subscription.</p>{% endif %}
<h2>Queues it holds</h2>
{% if queues %}<table id="consumer-queues"><thead><tr><th>Topic</th><th>Broker</th><th class="num">Queue</th><th class="num">Next pull offset</th>
<th class="num">Committed offset</th><th class="num">Cached messages</th><th class="num">Cached MiB</th><th>Locked</th></tr></thead><tbody>
{% for q in queues %}<tr><td>{{ q.topic }}</td><td>{{ q.brokerName }}</td><td class="num">{{ q.queueId }}</td><td class="num">{{ q.nextPullOffset }}</td>
<td class="num">{{ q.commitOffset }}</td><td class="num">{{ q.cachedMsgCount }}</td><td class="num">{{ q.cachedMsgSizeInMiB }}</td><td>{{ 'yes' if q.locked else 'no' }}</td></tr>{% endfor %}
</tbody></table>{% else %}<p class="muted">It holds no queue now (a rebalance gave them to other consumers of the group, or it has none to read).</p>{% endif %}
{% endblock %}"""

LIST_FILTER = """<form class="inline" method="get" id="list-filter"><fieldset class="controls">
{% for k, v in listing.keep %}<input type="hidden" name="{{ k }}" value="{{ v }}">{% endfor %}
 <label>Name contains <input name="q" value="{{ listing.query }}" placeholder="part of a name"></label>
 <button type="submit">Filter</button>
 {% if listing.query %}<a class="ghost" id="clear-filter" href="?{{ listing.keep|urlencode }}">Show all</a>{% endif %}
</fieldset></form>"""

LIST_PAGER = """{% if listing.pages > 1 %}<p class="pager" id="list-pager">Page {{ listing.number }} of {{ listing.pages }} ({{ listing.total }} in all)
{% if listing.number > 1 %}<a id="first-page" href="{{ listing.href(1) }}">first</a> <a id="prev-page" href="{{ listing.href(listing.number - 1) }}">previous</a>{% endif %}
{% if listing.number < listing.pages %}<a id="next-page" href="{{ listing.href(listing.number + 1) }}">next</a> <a id="last-page" href="{{ listing.href(listing.pages) }}">last</a>{% endif %}</p>{% endif %}"""

CONFIRM = """{% extends "layout" %}{% block content %}
<h1>{{ heading }}</h1>
<div class="error">{{ warning }}</div>
<form method="post" action="{{ action }}" id="confirm-form">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
{% for k, v in fields.items() %}<input type="hidden" name="{{ k }}" value="{{ v }}">{% endfor %}
<input type="hidden" name="confirm" value="yes">
<button type="submit" class="danger" id="confirm">{{ button }}</button>
<a class="ghost" href="{{ cancel }}">Cancel</a></fieldset></form>
{% endblock %}"""

GROUPS = """{% extends "layout" %}{% block content %}
<h1>Consumer groups</h1>
<h2>Create or update a group</h2>
{% with values = new_group, name = "", form_id = "create-group", button = "Create / update" %}{% include "group-form" %}{% endwith %}
{% if listing.listed %}<h2 id="group-count">{{ listing.total }} group{{ '' if listing.total == 1 else 's' }}{% if listing.query %} matching {{ listing.query }}{% endif %}</h2>
{% include "list-filter" %}{% endif %}
{% if unread %}<div class="error" id="unread-brokers"><b>Not every broker could be read.</b>
The groups below miss what these brokers hold (groups only they know, or their offsets there):
<ul>{% for name, why in unread %}<li data-broker="{{ name }}">{{ name }} ({{ why }})</li>{% endfor %}</ul></div>{% endif %}
{% if groups %}
{% macro by(key, label, cls="") %}<th class="{{ cls }}{{ ' sorted' if sort == key else '' }}"><a id="sort-{{ key }}" href="?{{ {'q': listing.query, 'sort': key}|urlencode if listing.query else {'sort': key}|urlencode }}">{{ label }}{{ ' ▾' if sort == key and key != 'name' else (' ▴' if sort == key else '') }}</a></th>{% endmacro %}
<table id="groups" data-sort="{{ sort }}"><thead><tr>{{ by('name', 'Group') }}<th>Topics</th>{{ by('consumers', 'Online consumers', 'num') }}
{{ by('lag', 'Lag', 'num') }}{{ by('tps', 'Consume TPS', 'num') }}<th>Consume enabled</th></tr></thead><tbody>
{% for g in groups %}<tr data-group="{{ g.name }}"><td><a href="/groups/{{ g.name|urlencode }}">{{ g.name }}</a>
{% if g.system %} <span class="badge">system</span>{% endif %}{% if g.spark %} <span class="badge warn" title="a Spark query keeps its offsets in its checkpoint">Spark?</span>{% endif %}{% if g.offsets_only %} <span class="badge" title="stored offsets, no group config, nobody online">offsets only</span>{% endif %}</td>
<td>{{ g.topics|join(', ') or '-' }}</td><td class="num">{{ g.online }}</td>
<td class="num">{{ g.lag }}</td><td class="num">{{ '-' if g.tps is none else '%.1f'|format(g.tps) }}</td>
<td>{{ '-' if g.enabled is none else ('yes' if g.enabled else 'no') }}</td></tr>{% endfor %}
</tbody></table>
{% include "list-pager" %}
<p class="muted">Listed: every group with a group config or stored offsets on a master broker.
Sorted by name, only the groups on this page are asked for their figures; sorted by
lag, TPS or consumers, every group matching the filter is, so the sort spans every page.
<b>Spark?</b> marks a group named like the Spark source's default (<code>spark-&lt;topic&gt;</code>)
or one with stored offsets, no group config and nobody online, which is how a Spark query's
group looks to the brokers.</p>
{% elif listing.query %}<div class="empty" id="no-match"><b>No group matches {{ listing.query }}</b>{{ listing.listed }} listed in all.</div>
{% elif no_brokers %}{% include "no-brokers" %}
{% else %}<div class="empty"><b>No consumer groups</b>A group appears once one of its consumers
has sent a heartbeat to a broker or stored an offset.</div>{% endif %}
{% endblock %}"""

GROUP = """{% extends "layout" %}{% block content %}
<h1>Consumer group {{ group }}</h1>
<div class="cards">
 <div class="card"><div class="k">Total lag</div><div class="v" id="group-lag">{{ stats.lag }}</div></div>
 <div class="card"><div class="k">Consume TPS</div><div class="v" id="group-tps">{{ '%.1f'|format(stats.consume_tps) }}</div></div>
 <div class="card"><div class="k">Topics</div><div class="v">{{ stats.topics|length }}</div></div>
 <div class="card"><div class="k">Online consumers</div><div class="v">{{ consumers|length }}</div></div>
 <div class="card"><div class="k">Dead letters</div><div class="v" id="dead-letters">{% if dead_letters is none %}0{% else %}<a href="/dlq/{{ group|urlencode }}">{{ dead_letters }}</a>{% endif %}</div></div>
</div>
<h2>Lag, the last hour <span class="muted" id="chart-note">(refreshes every 2 s)</span></h2>
<svg id="lag-chart" class="chart" viewBox="0 0 900 220" height="220"></svg>
<h2>Queues</h2>
{% if stats.queues %}
<table id="group-queues"><thead><tr><th>Topic</th><th>Broker</th><th class="num">Queue</th>
<th class="num">Broker offset</th><th class="num">Consumer offset</th><th class="num">Lag</th><th>Last consumed</th></tr></thead>
<tbody id="queue-rows">{% for q in stats.queues %}<tr><td>{{ q.topic }}</td><td>{{ q.broker_name }}</td>
<td class="num">{{ q.queue_id }}</td><td class="num">{{ q.broker_offset }}</td><td class="num">{{ q.consumer_offset }}</td>
<td class="num">{{ q.lag }}</td><td>{{ when(q.last_timestamp) }}</td></tr>{% endfor %}</tbody></table>
{% else %}<div class="empty"><b>No committed offsets</b>The group has not committed an offset of any topic yet.</div>{% endif %}
<h2>Consumers</h2>
{% if consumers %}<table id="consumers"><thead><tr><th>Client id</th><th>Address</th><th>Language</th><th>Version</th></tr></thead><tbody>
{% for c in consumers %}<tr><td><a href="/groups/{{ group|urlencode }}/clients/{{ c.clientId|urlencode }}">{{ c.clientId }}</a></td><td>{{ c.clientAddr }}</td><td>{{ c.language }}</td><td>{{ c.version_name }}</td></tr>{% endfor %}
</tbody></table>
{% if connections.subscriptions %}<p class="muted" id="consume-mode">{{ connections.consume_type or '-' }}, {{ connections.message_model or '-' }}, {{ connections.consume_from_where or '-' }}</p>
<table id="subscriptions"><thead><tr><th>Subscribed topic</th><th>Expression</th></tr></thead><tbody>
{% for topic, expression in connections.subscriptions|dictsort %}<tr data-topic="{{ topic }}"><td>{{ topic }}</td><td>{{ expression }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% else %}<p class="muted">No consumer of this group is connected.</p>{% endif %}
<h2>Configuration</h2>
{% if config is none %}<p class="muted" id="no-config">No broker holds a subscription-group config for {{ group }} (it has offsets only). Saving the form creates one.</p>{% endif %}
{% with values = config or new_group, name = group, form_id = "group-config", button = "Save" %}{% include "group-form" %}{% endwith %}
<h2>Reset offsets</h2>
{% if spark %}<p class="error" id="spark-note">This group looks like a Spark query's. A Spark query keeps its own
offsets in its checkpoint: resetting the brokers' copy does not change what it reads next.</p>{% endif %}
<form class="inline" method="post" action="/groups/{{ group|urlencode }}/reset" id="reset-form">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <label>Topic <select name="topic">{% for t in reset_topics %}<option>{{ t }}</option>{% endfor %}</select></label>
 <label>To <select name="to"><option value="earliest">earliest</option><option value="latest">latest</option>
  <option value="time">a point in time</option></select></label>
 <label>Time (local) <input name="time" type="datetime-local" step="1"></label>
 <button type="submit" class="danger">Reset…</button></fieldset></form>
<h2>Danger zone</h2>
<form class="inline" method="post" action="/groups/{{ group|urlencode }}/delete" id="delete-group">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
 <label><span><input type="checkbox" name="clean_offset" value="true"> and its stored offsets</span></label>
 <button type="submit" class="ghost">Delete group…</button></fieldset></form>
<script>{{ chart_js|safe }}</script>
<script>
(function () {
  var url = {{ api_url|tojson }};
  var svg = document.getElementById("lag-chart");
  function draw(points) { chart(svg, [{points: points, color: "#0b6bcb"}],
                                {title: "messages behind", integer: true}); }
  function rows(queues) {
    var body = document.getElementById("queue-rows");
    if (!body) { return; }
    while (body.firstChild) { body.removeChild(body.firstChild); }
    queues.forEach(function (q) {
      var tr = document.createElement("tr");
      [q.topic, q.brokerName, q.queueId, q.brokerOffset, q.consumerOffset, q.lag, q.lastConsumed]
        .forEach(function (v, i) {
          var td = document.createElement("td");
          if (i >= 2 && i <= 5) { td.className = "num"; }
          td.textContent = String(v);
          tr.appendChild(td);
        });
      body.appendChild(tr);
    });
  }
  function poll() {
    fetch(url, {cache: "no-store"}).then(function (r) { return r.json(); }).then(function (data) {
      document.getElementById("group-lag").textContent = String(data.lag);
      document.getElementById("group-tps").textContent = data.consumeTps.toFixed(1);
      document.getElementById("chart-note").textContent = "(refreshes every 2 s; updated " +
        clock(data.ts) + ")";
      draw(data.history);
      rows(data.queues);
    }).catch(function (e) {
      document.getElementById("chart-note").textContent = "(update failed: " + e + ")";
    });
  }
  draw({{ history|tojson }});
  poll();
  setInterval(poll, 2000);
})();
</script>
{% endblock %}"""

MESSAGES = """{% extends "layout" %}{% block content %}
<h1>Messages</h1>
<div class="row">
<form class="inline" method="get" action="/messages" id="by-key"><input type="hidden" name="by" value="key">
 <label>Topic <input name="topic" value="{{ q.topic }}" required></label>
 <label>Key <input name="key" value="{{ q.key }}" required></label><button type="submit">Find by key</button></form>
<form class="inline" method="get" action="/messages" id="by-id"><input type="hidden" name="by" value="id">
 <label>Message id <input name="msg_id" value="{{ q.msg_id }}" size="34" required></label>
 <label>Topic (for unique keys) <input name="topic" value="{{ q.topic }}"></label><button type="submit">Find by id</button></form>
<form class="inline" method="get" action="/messages" id="by-offset"><input type="hidden" name="by" value="offset">
 <label>Topic <input name="topic" value="{{ q.topic }}" required></label>
 <label>Broker <input name="broker" value="{{ q.broker }}" required style="width:110px"></label>
 <label>Queue <input name="queue_id" type="number" min="0" value="{{ q.queue_id }}" required style="width:70px"></label>
 <label>Offset <input name="offset" type="number" min="0" value="{{ q.offset }}" required style="width:100px"></label>
 <button type="submit">Find at offset</button></form>
</div>
{% if searched %}<h2>{{ results|length }} message{{ '' if results|length == 1 else 's' }}</h2>
{% for m in results %}
<div class="row message" style="margin-bottom:18px"><dl class="kv grow">
<dt>Message id</dt><dd class="msg-id">{{ m.uniq_key or m.msg_id }}</dd>{% if m.msg_id != m.uniq_key %}<dt>Offset id</dt><dd>{{ m.msg_id }}</dd>{% endif %}
<dt>Commit-log offset</dt><dd>{{ m.commit_log_offset }} ({{ m.store_size }} bytes stored)</dd>
<dt>Topic</dt><dd>{{ m.topic }}</dd><dt>Queue</dt><dd>{{ m.broker_name or '-' }} / {{ m.queue_id }} @ {{ m.queue_offset }}</dd>
<dt>Tags</dt><dd>{{ m.tags or '-' }}</dd><dt>Keys</dt><dd class="msg-keys">{{ m.msg_keys|join(' ') or '-' }}</dd>
<dt>Stored</dt><dd>{{ when(m.store_timestamp) }} on {{ m.store_host }}</dd><dt>Born</dt><dd>{{ when(m.born_timestamp) }} on {{ m.born_host }}</dd>
<dt>Reconsumed</dt><dd>{{ m.reconsume_times }}</dd>
{% if m.consumption is not none %}<dt>Consumed by</dt><dd class="consumption">{% for g, done in m.consumption %}<span class="badge {{ 'ok' if done else 'warn' }}" data-group="{{ g }}">{{ g }}: {{ 'consumed' if done else 'not consumed' }}</span> {% else %}no group consumes {{ m.topic }}{% endfor %}</dd>{% endif %}
<dt>Properties</dt><dd>{% for k, v in m.properties|dictsort %}<span class="badge">{{ k }}={{ v }}</span> {% endfor %}</dd>
</dl><div class="grow"><div class="muted">Body: {{ m.preview.size }} bytes, shown as {{ m.preview.kind }}{{ ', truncated' if m.preview.truncated }}</div>
<pre class="body">{{ m.preview.text }}</pre>
{% if m.consumers is defined %}<form class="inline resend" method="post" action="/messages/resend">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
<input type="hidden" name="msg_id" value="{{ m.uniq_key or m.msg_id }}"><input type="hidden" name="topic" value="{{ m.topic }}">
{% if m.consumers %}<label>Resend to <select name="target">{% for g, c in m.consumers %}<option value="{{ g }} {{ c }}">{{ g }} / {{ c }}</option>{% endfor %}</select></label>
<button type="submit">Resend to consumer</button>{% else %}<span class="muted">No consumer of a group consuming {{ m.topic }} is online to resend it to.</span>{% endif %}
</fieldset></form>{% endif %}</div></div>
{% if m.trace is defined %}<div class="trace" style="margin:-8px 0 18px"><h3>Trace</h3>
{% if m.trace is none %}<p class="muted trace-none">No trace: the trace topic (RMQ_SYS_TRACE_TOPIC) cannot be read. Clients record one with message trace on (<code>enable_msg_trace</code>), on brokers with <code>traceTopicEnable=true</code>.</p>
{% elif not m.trace.sends and not m.trace.consumes %}<p class="muted trace-none">No trace recorded for this message: its producer and consumers did not have message trace on (<code>enable_msg_trace</code>), or their records have not arrived yet.</p>
{% else %}<table class="trace"><thead><tr><th>Event</th><th>Group</th><th>Client</th><th>At</th><th class="num">Took</th><th class="num">Retries</th><th>Result</th></tr></thead><tbody>
{% for t in m.trace.sends %}<tr class="trace-send" data-group="{{ t.group }}"><td>sent</td><td>{{ t.group }}</td><td>{{ t.client_host }}</td><td>{{ when(t.send_ms) }}</td><td class="num">{{ t.cost_ms }} ms</td><td class="num">-</td><td>{{ 'SEND_OK' if t.success else 'failed' }}{% if t.store_ms %}, stored {{ when(t.store_ms) }} on {{ t.store_host }}{% endif %}</td></tr>
{% endfor %}{% for t in m.trace.consumes %}<tr class="trace-consume" data-group="{{ t.group }}"><td>consumed</td><td>{{ t.group or '?' }}</td><td>{{ t.client_host }}</td><td>{{ when(t.consume_ms) }}</td><td class="num">{{ '%d ms'|format(t.cost_ms) if t.cost_ms is not none else '-' }}</td><td class="num">{{ t.retry_times }}</td><td class="outcome">{{ 'success' if t.success else ('not finished' if t.success is none else 'failed') }}</td></tr>
{% endfor %}</tbody></table>{% if m.trace.consumes_may_lag %}<p class="muted trace-lag">No consume record yet: it was stored a moment ago, and consume records may not be indexed yet; reload the page in a moment.</p>{% endif %}{% if m.trace.refused %}<p class="muted">{{ m.trace.refused|length }} trace record(s) could not be read.</p>{% endif %}{% endif %}</div>{% endif %}
{% else %}<div class="empty"><b>Nothing found</b>No message matched.</div>{% endfor %}{% endif %}
{% endblock %}"""

LOGICAL = """{% extends "layout" %}{% block content %}
<h1>Logical queues <span class="muted">(RIP-21)</span></h1>
<p class="muted">A logical queue is an ordered list of segments on physical queues: clients see a fixed set of
queues under the placeholder broker, and migrating a queue moves only this mapping (the old segment is sealed at
an exact end and stays readable). Each table is the newest mapping the brokers hold.</p>
{% for t in tables %}
<h2>{{ t.topic }} {% if not t.error %}<span class="muted">{{ t.total }} logical queues, epoch {{ t.epoch }}</span>{% endif %}</h2>
{% if t.error %}<div class="error">{{ t.error }}</div>{% else %}
<table class="logical" data-topic="{{ t.topic }}"><thead><tr><th>brokerName</th><th>MessageQueue</th><th>LogicalQueue (range)</th><th>QueueStatus</th></tr></thead><tbody>
{% for broker, mq, lq, state in t.rows %}<tr><td>{{ broker }}</td><td>{{ mq }}</td><td>{{ lq }}</td>
<td><span class="badge {{ 'ok' if state == 'NORMAL' else ('bad' if state == 'EXPIRED' else 'warn') }}">{{ state }}</span></td></tr>{% endfor %}
</tbody></table>{% endif %}
{% else %}<div class="empty" id="no-logical"><b>No logical-queue topics</b>
None of the {{ broker_count }} broker{{ '' if broker_count == 1 else 's' }} holds a topic with logical queues. Create one below.</div>
{% endfor %}
<div class="row" style="margin-top:22px">
<div class="grow"><h2>Create a logical topic</h2>
<form class="inline" method="post" action="/logical-queues" id="create-logical">{{ csrf_field }}<fieldset class="controls" {{ lock }}><input type="hidden" name="action" value="create">
 <label>Topic <input name="topic" required pattern="[%|a-zA-Z0-9_-]+" maxlength="127"></label>
 <label>Logical queues <input name="queues" type="number" min="1" max="1024" value="4" style="width:90px"></label>
 <button type="submit">Create</button></fieldset></form></div>
<div class="grow"><h2>Migrate a logical queue</h2>
<form class="inline" method="post" action="/logical-queues" id="migrate-logical">{{ csrf_field }}<fieldset class="controls" {{ lock }}><input type="hidden" name="action" value="migrate">
 <label>Topic <select name="topic">{% for t in tables %}<option>{{ t.topic }}</option>{% endfor %}</select></label>
 <label>Logical queue <input name="lq" type="number" min="0" value="0" style="width:80px"></label>
 <label>To broker <select name="target">{% for b in brokers %}<option>{{ b }}</option>{% endfor %}</select></label>
 <button type="submit">Migrate</button></fieldset></form></div>
</div>
{% endblock %}"""

LMQ = """{% extends "layout" %}{% block content %}
<h1>Light message queues <span class="muted">(RIP-28)</span></h1>
<table id="lmq"><thead><tr><th>Broker</th><th>Address</th><th>LMQ enabled</th><th class="num">Queues</th><th class="num">Entries</th></tr></thead><tbody>
{% for b in brokers %}<tr><td>{{ b.broker_name }}</td><td>{{ b.address }}</td>
<td>{% if b.error %}<span class="badge bad">unreachable</span>{% elif b.s.lmqEnabled == 'true' %}<span class="badge ok">yes</span>{% else %}<span class="badge">no</span>{% endif %}</td>
<td class="num">{{ b.s.lmqCount or '-' }}</td><td class="num">{{ b.s.lmqEntries or '-' }}</td></tr>{% endfor %}
</tbody></table>
<p class="muted">LMQs are not registered with the name server; counts come from each broker's runtime
info (refreshed by the broker at most every 30 s). Enable them with <code>enableLmq=true</code> and
<code>enableMultiDispatch=true</code>.</p>
{% endblock %}"""

LOGIN = """{% extends "layout" %}{% block content %}
<form class="login" method="post" action="/login" id="login-form">
<h1>Log in</h1>
<input type="hidden" name="login_token" value="{{ login_token }}"><input type="hidden" name="next" value="{{ next }}">
<label>User <input name="username" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Log in</button></form>
{% endblock %}"""

#: ``clock(ms)``: a time as local HH:MM:SS (the axis and the "updated" note alike).
#: ``chart(svg, series, opts)``: lines of ``[epoch ms, value]`` points on a time axis
#: (clock times) and a value axis whose ticks are round steps from 0 (1, 2 or 5 times a
#: power of ten; whole numbers when ``opts.integer``). A series that is all zero has the
#: single tick 0 and its line on the axis; with no point at all, ``opts.empty`` is written
#: across it.
CHART_JS = """
function clock(ms) {
  var d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map(function (n) {
    return (n < 10 ? "0" : "") + n; }).join(":");
}
function chart(svg, series, opts) {
  var NS = "http://www.w3.org/2000/svg";
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function ticks(max) {
    if (!(max > 0)) { return [0]; }
    var raw = max / 4, mag = Math.pow(10, Math.floor(Math.log10(raw))), step = mag * 10;
    [1, 2, 5].some(function (m) { if (m * mag >= raw) { step = m * mag; return true; } return false; });
    if (opts.integer && step < 1) { step = 1; }
    var out = [];
    for (var i = 0; out.length === 0 || out[out.length - 1] < max; i++) { out.push(i * step); }
    return out;
  }
  function label(v) { return opts.integer ? String(Math.round(v)) : String(+v.toPrecision(3)); }
  while (svg.firstChild) { svg.removeChild(svg.firstChild); }
  var W = Math.max(svg.clientWidth, 300), H = 220, L = 64, R = 14, T = 22, B = 30;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  var max = 0, t0 = Infinity, t1 = -Infinity;
  series.forEach(function (s) { s.points.forEach(function (p) {
    if (p[1] > max) { max = p[1]; } if (p[0] < t0) { t0 = p[0]; } if (p[0] > t1) { t1 = p[0]; } }); });
  if (t0 === Infinity) { t0 = Date.now() - 60000; t1 = Date.now(); }
  var span = Math.max(t1 - t0, 1000), ys = ticks(max), top = ys[ys.length - 1] || 1;
  function X(t) { return L + (W - L - R) * (t - t0) / span; }
  function Y(v) { return H - B - (H - T - B) * v / top; }
  ys.forEach(function (v) {
    svg.appendChild(el("line", {x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: v ? "#eaecf0" : "#98a2b3"}));
    svg.appendChild(el("text", {"class": "ytick", x: L - 6, y: Y(v) + 4, "text-anchor": "end",
                                "font-size": 11, fill: "#667085"}, label(v)));
  });
  svg.appendChild(el("text", {"class": "ytitle", x: L, y: 13, "font-size": 11, fill: "#344054"},
                          opts.title));
  [0, 0.5, 1].forEach(function (f, i) {
    svg.appendChild(el("line", {x1: X(t0 + span * f), x2: X(t0 + span * f), y1: H - B, y2: H - B + 4, stroke: "#98a2b3"}));
    svg.appendChild(el("text", {"class": "xtick", x: X(t0 + span * f), y: H - 10, "font-size": 11,
      fill: "#667085", "text-anchor": ["start", "middle", "end"][i]}, clock(t0 + span * f)));
  });
  if (opts.empty && series.every(function (s) { return !s.points.length; })) {
    svg.appendChild(el("text", {"class": "no-data", x: (L + W - R) / 2, y: (T + H - B) / 2,
                                "text-anchor": "middle", "font-size": 13, fill: "#667085"},
                       opts.empty));
  }
  series.forEach(function (s) {
    if (!s.points.length) { return; }
    var d = s.points.map(function (p, j) {
      return (j ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1); }).join(" ");
    svg.appendChild(el("path", {d: d, fill: "none", stroke: s.color, "stroke-width": 2}));
    var last = s.points[s.points.length - 1];
    svg.appendChild(el("circle", {cx: X(last[0]), cy: Y(last[1]), r: 3.5, fill: s.color}));
  });
}
"""

ERROR = """{% extends "layout" %}{% block content %}<h1>{{ title }}</h1>{% endblock %}"""

_ENV = jinja2.Environment(
    loader=jinja2.DictLoader({
        "layout": LAYOUT, "cluster": CLUSTER, "broker": BROKER, "broker-config": BROKER_CONFIG, "topics": TOPICS,
        "topic": TOPIC, "topic-messages": TOPIC_MESSAGES, "confirm": CONFIRM, "groups": GROUPS, "group": GROUP,
        "messages": MESSAGES, "logical": LOGICAL, "lmq": LMQ, "error": ERROR,
        "list-filter": LIST_FILTER, "list-pager": LIST_PAGER, "group-form": GROUP_FORM,
        "no-brokers": NO_BROKERS, "consumer": CONSUMER,
        "login": LOGIN, "dlq-list": DLQ_LIST, "dlq": DLQ, "dlq-resend": DLQ_RESEND,
    }),
    autoescape=True,
    undefined=jinja2.ChainableUndefined,
)
_ENV.globals.update(hb=human_bytes, when=when, uptime=uptime, chart_js=CHART_JS)

NAV = [("/cluster", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/dlq", "Dead letters"), ("/messages", "Messages"), ("/logical-queues", "Logical queues"), ("/lmq", "LMQ")]


def render(name: str, **context: Any) -> str:
    context.setdefault("nav", NAV)
    return _ENV.get_template(name).render(**context)
