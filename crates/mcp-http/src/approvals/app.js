// The approvals page works without this script; with it, the page follows changes: when
// the person's elicitations change (a new one, one answered elsewhere, cancelled, expired),
// it reloads — unless the person is typing, then it says so and waits.
"use strict";
(function () {
  // Only the signed-in page follows changes (the sign-in page has no list).
  if (!window.EventSource || !document.getElementById("waiting")) return;
  var events = new EventSource("/approvals/events");
  events.addEventListener("changed", function () {
    var active = document.activeElement;
    var typing = active && (active.tagName === "INPUT" && active.type === "text");
    if (!typing) { window.location.replace("/approvals"); return; }
    if (document.getElementById("stale")) return;
    var note = document.createElement("p");
    note.id = "stale";
    note.className = "stale";
    note.setAttribute("role", "status");
    note.textContent = "Something changed; the page reloads once you submit or leave the field.";
    document.querySelector("main").prepend(note);
    active.addEventListener("blur", function () { window.location.replace("/approvals"); }, { once: true });
  });
})();
