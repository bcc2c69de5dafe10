// The approvals page works without this script; with it, the page follows changes: when
// the person's elicitations change (a new one, one answered elsewhere, cancelled, expired),
// it reloads — unless the person is typing, then it says so and waits.
"use strict";
(function () {
  // Set once the page itself changes the list (a form, an upload): its own next page follows.
  var submitting = false;
  var events = null;
  // Uploads: the file's bytes as the body, the page's form token in a header.
  document.querySelectorAll("button.upload").forEach(function (button) {
    button.addEventListener("click", function () {
      var input = document.getElementById(button.getAttribute("data-for"));
      var status = button.parentElement.querySelector(".upload-status");
      var file = input && input.files && input.files[0];
      if (!file) { status.textContent = " Choose a file first."; return; }
      var max = input.getAttribute("data-max-bytes");
      if (max !== null && file.size > Number(max)) {
        status.textContent = " The file is " + file.size + " bytes; this question takes at most " + max + ".";
        return;
      }
      var csrf = document.querySelector("input[name=csrf]").value;
      status.textContent = " Uploading…";
      submitting = true;
      if (events) events.close();
      fetch(input.getAttribute("data-upload"), {
        method: "POST",
        body: file,
        credentials: "same-origin",
        headers: {
          "content-type": file.type || "application/octet-stream",
          "x-file-name": encodeURIComponent(file.name),
          "x-csrf-token": csrf
        }
      }).then(function (response) {
        return response.json().then(function (body) {
          if (response.ok) { window.location.replace("/approvals?done=uploaded"); return; }
          submitting = false;
          status.textContent = " " + (body.error || (body.errors || []).join("; ") || "The upload failed.");
        });
      }, function () { status.textContent = " The upload failed."; });
    });
  });
  // Only the signed-in list follows changes (not the sign-in page, nor one confirmation's
  // page); it tells the feed what it shows, so a change made while it loaded counts too.
  var waiting = document.getElementById("waiting");
  var seen = waiting && waiting.getAttribute("data-seen");
  if (!window.EventSource || !seen) return;
  events = new EventSource("/approvals/events?seen=" + encodeURIComponent(seen));
  document.addEventListener("submit", function () { submitting = true; events.close(); }, true);
  events.addEventListener("changed", function () {
    if (submitting) return;
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
