# ruff: noqa: E501  (HTML lines; wrapping them would only hurt reading)
"""The dead-letter pages' HTML (registered with the others in :mod:`.templates`): every
DLQ with its count, one DLQ's messages with the resend and export forms, and a resend's
progress, which a small inline script follows."""

from __future__ import annotations

__all__ = ["DLQ", "DLQ_LIST", "DLQ_RESEND"]

DLQ_LIST = """{% extends "layout" %}{% block content %}
<h1>Dead-letter queues</h1>
{% if listing.listed %}<h2 id="dlq-count">{{ listing.total }} dead-letter queue{{ '' if listing.total == 1 else 's' }}{% if listing.query %} matching {{ listing.query }}{% endif %}</h2>
{% include "list-filter" %}{% endif %}
{% if rows %}<table id="dlqs"><thead><tr><th>Group</th><th>Dead-letter topic</th><th class="num">Messages</th></tr></thead><tbody>
{% for r in rows %}<tr data-group="{{ r.group }}"><td><a href="/groups/{{ r.group|urlencode }}">{{ r.group }}</a></td>
<td><a href="/dlq/{{ r.group|urlencode }}">%DLQ%{{ r.group }}</a></td>
<td class="num dlq-messages">{{ '-' if r.count is none else r.count }}</td></tr>{% endfor %}
</tbody></table>
{% include "list-pager" %}
{% elif listing.query %}<div class="empty" id="no-match"><b>No dead-letter queue matches {{ listing.query }}</b>{{ listing.listed }} listed in all.</div>
{% else %}<div class="empty" id="no-dlq"><b>No dead-letter queues</b>A group's <code>%DLQ%&lt;group&gt;</code> is created when a message
of it has been retried its maximum number of times (16 by default) without success.</div>{% endif %}
{% endblock %}"""

DLQ = """{% extends "layout" %}{% block content %}
<h1>Dead letters of <a href="/groups/{{ group|urlencode }}">{{ group }}</a></h1>
<p id="dlq-total">{{ total }} message{{ '' if total == 1 else 's' }} stored in {{ topic }}, newest first{% if pages > 1 %}; page {{ page }} of {{ pages }}{% endif %}.
Export this page: <a id="export-csv" href="/dlq/{{ group|urlencode }}/export?format=csv&amp;page={{ page }}">CSV</a>
· <a id="export-json" href="/dlq/{{ group|urlencode }}/export?format=json&amp;page={{ page }}">JSON</a></p>
{% if letters %}
<form method="post" action="/dlq/{{ group|urlencode }}/resend" id="dlq-resend">{{ csrf_field }}<fieldset class="controls" {{ lock }}>
<table id="dlq-messages"><thead><tr><th><input type="checkbox" id="select-all" title="select every message of the page"></th><th>Message id</th><th>Original topic</th><th class="num">Reconsumed</th><th>Stored</th><th>Keys</th><th>Body</th><th></th></tr></thead><tbody>
{% for d in letters %}<tr data-msg="{{ d.msg_id }}"><td><input type="checkbox" name="msg" value="{{ d.msg_id }}"></td>
<td><a href="/messages?{{ {'by': 'id', 'topic': topic, 'msg_id': d.msg_id}|urlencode }}">{{ d.uniq_key or d.msg_id }}</a></td>
<td>{% if d.topic %}<a href="/topics/{{ d.topic|urlencode }}">{{ d.topic }}</a>{% else %}-{% endif %}</td>
<td class="num">{{ d.reconsume_times }}</td><td>{{ when(d.store_timestamp) }}</td><td>{{ d.msg_keys|join(' ') or '-' }}</td>
<td class="preview" title="{{ d.preview.size }} bytes">{{ d.preview.text|truncate(60, true, '…') }}</td>
<td>{% if consumers %}<button type="submit" name="one" value="{{ d.msg_id }}" class="ghost resend-one">Resend…</button>{% endif %}</td></tr>{% endfor %}
</tbody></table>
{% if pages > 1 %}<p class="pager" id="dlq-pager">{% if page > 1 %}<a id="prev-page" href="?page={{ page - 1 }}">newer</a>{% endif %}
{% if page < pages %}<a id="next-page" href="?page={{ page + 1 }}">older</a>{% endif %}</p>{% endif %}
<div class="inline" style="margin-top:12px;display:flex;gap:10px;align-items:flex-end;flex-wrap:wrap">
{% if consumers %}<label>To consumer <select name="target">{% for c in consumers %}<option value="{{ c }}">{{ c }}</option>{% endfor %}</select></label>
<button type="submit" name="which" value="selected" id="resend-selected">Resend selected…</button>
<button type="submit" name="which" value="all" class="danger" id="resend-all">Resend all {{ total }}…</button>
{% else %}<span class="muted" id="no-consumer">No consumer of {{ group }} is online: a message is resent to a running consumer of its group, whose listener consumes it at once (CONSUME_MESSAGE_DIRECTLY).</span>{% endif %}
</div></fieldset></form>
<script>
document.getElementById("select-all").addEventListener("change", function (e) {
  document.querySelectorAll('#dlq-messages input[name="msg"]').forEach(function (box) { box.checked = e.target.checked; });
});
</script>
{% else %}<div class="empty" id="no-letters"><b>No dead letters</b>{{ topic }} holds no message{% if page > 1 %} on page {{ page }}{% endif %}.</div>{% endif %}
{% endblock %}"""

DLQ_RESEND = """{% extends "layout" %}{% block content %}
<h1>Resending dead letters of <a href="/groups/{{ job.group|urlencode }}">{{ job.group }}</a></h1>
<p>To consumer <b>{{ job.client_id }}</b>: its listener consumes each message at once; nothing is committed and the messages stay in the dead-letter queue.</p>
<p><progress id="resend-progress" max="{{ job.total or 1 }}" value="{{ job.attempted }}"></progress>
<span id="resend-status">{{ job.attempted }} of {{ job.total }} tried: {{ job.resent }} consumed, {{ job.failures|length }} failed{{ '' if job.finished else ' …' }}</span></p>
<p id="resend-done" {% if not job.finished %}hidden{% endif %}>Finished. <a href="/dlq/{{ job.group|urlencode }}">Back to the dead letters</a></p>
<div class="error" id="resend-error" {% if not job.error %}hidden{% endif %}>{{ job.error or '' }}</div>
<h2>Not consumed</h2>
<table id="resend-failures"><thead><tr><th>Message id</th><th>Why</th></tr></thead><tbody>
{% for msg_id, why in job.failures %}<tr><td>{{ msg_id }}</td><td>{{ why }}</td></tr>{% endfor %}</tbody></table>
<script>
(function () {
  var url = {{ api_url|tojson }};
  function cell(row, text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
  function show(job) {
    var bar = document.getElementById("resend-progress");
    bar.max = job.total || 1; bar.value = job.attempted;
    document.getElementById("resend-status").textContent = job.attempted + " of " + job.total + " tried: " +
      job.resent + " consumed, " + job.failed.length + " failed" + (job.finished ? "" : " …");
    var body = document.querySelector("#resend-failures tbody");
    while (body.firstChild) { body.removeChild(body.firstChild); }
    job.failed.forEach(function (f) { var tr = document.createElement("tr"); cell(tr, f.msgId); cell(tr, f.why); body.appendChild(tr); });
    if (job.error) { var e = document.getElementById("resend-error"); e.textContent = job.error; e.hidden = false; }
    if (job.finished) { document.getElementById("resend-done").hidden = false; return; }
    setTimeout(poll, 500);
  }
  function poll() { fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(show, function () { setTimeout(poll, 2000); }); }
  {% if not job.finished %}setTimeout(poll, 300);{% endif %}
})();
</script>
{% endblock %}"""
