// The approvals page works without this script; with it, the page follows changes: when
// the person's elicitations change (a new one, one answered elsewhere, cancelled, expired),
// it reads the page again and updates it in place — a new item is added, a finished one
// removed, and an item already shown is kept as it is, so a note or an edit being typed
// (and the field's focus) survives whatever arrives.
"use strict";
(function () {
  // Set once the page itself changes the list (a form, an upload): its own next page follows.
  var submitting = false;
  var events = null;
  // Uploads: the file's bytes as the body, the page's form token in a header.
  function wire(root) {
    root.querySelectorAll("button.upload").forEach(function (button) {
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
  }
  wire(document);
  // Only the signed-in list follows changes (not the sign-in page, nor one confirmation's
  // page); it tells the feed what it shows, so a change made while it loaded counts too.
  var heading = document.getElementById("waiting");
  if (!window.EventSource || !heading || !heading.getAttribute("data-seen")) return;
  document.addEventListener("submit", function () { submitting = true; if (events) events.close(); }, true);

  // In a background tab: the count in the title, and a browser notification for each
  // arrival (once the person allowed them with the button; a notification shows plain
  // text, never markup).
  var title = document.title;
  function waiting() { return heading.parentElement.querySelectorAll("article.item").length; }
  function retitle() {
    var n = waiting();
    document.title = (n > 0 ? "(" + n + ") " : "") + title;
  }
  retitle();
  var canNotify = typeof window.Notification === "function";
  if (canNotify && Notification.permission === "default") {
    var ask = document.createElement("button");
    ask.type = "button";
    ask.className = "notify";
    ask.textContent = "Notify me in this browser";
    ask.addEventListener("click", function () {
      Notification.requestPermission().then(function () { ask.remove(); }, function () { ask.remove(); });
    });
    (document.querySelector("header") || heading.parentElement).appendChild(ask);
  }
  function tell(added) {
    if (!canNotify || !document.hidden || Notification.permission !== "granted" || added.length === 0) return;
    var first = added[0].querySelector("h3");
    var body = (first ? first.textContent : "Something waits for you.") +
      (added.length > 1 ? " (and " + (added.length - 1) + " more)" : "");
    try {
      new Notification("Waiting for you (" + waiting() + ")", { body: body, tag: "mcp-gateway-approvals" });
    } catch (e) { /* a browser that will not show one: the title still counts */ }
  }

  // The page as the server renders it now, merged into this one.
  function update(next) {
    var nextHeading = next.getElementById("waiting");
    if (!nextHeading) { window.location.replace("/approvals"); return; }
    var section = heading.parentElement;
    var nextSection = nextHeading.parentElement;
    heading.textContent = nextHeading.textContent;
    heading.setAttribute("data-seen", nextHeading.getAttribute("data-seen") || "");
    var wanted = {};
    nextSection.querySelectorAll("article.item").forEach(function (item) { wanted[item.id] = item; });
    section.querySelectorAll("article.item").forEach(function (item) {
      if (!wanted[item.id]) item.remove();
    });
    section.querySelectorAll(":scope > p.empty").forEach(function (p) { p.remove(); });
    nextSection.querySelectorAll(":scope > p.empty").forEach(function (p) {
      section.appendChild(document.importNode(p, true));
    });
    var after = heading;
    var added = [];
    nextSection.querySelectorAll("article.item").forEach(function (item) {
      var shown = document.getElementById(item.id);
      if (shown) {
        // Kept as it is (what is typed in it, its focus); only the time left is new.
        var left = shown.querySelector(".left"), nextLeft = item.querySelector(".left");
        if (left && nextLeft) left.textContent = nextLeft.textContent;
        after = shown;
        return;
      }
      var fresh = document.importNode(item, true);
      after.after(fresh);
      wire(fresh);
      added.push(fresh);
      after = fresh;
    });
    retitle();
    tell(added);
    // The grants and the history are read-only lists: replaced whole.
    ["grants", "history"].forEach(function (id) {
      var mine = document.getElementById(id), theirs = next.getElementById(id);
      if (mine && theirs) mine.parentElement.replaceWith(document.importNode(theirs.parentElement, true));
    });
  }

  function follow() {
    events = new EventSource("/approvals/events?seen=" + encodeURIComponent(heading.getAttribute("data-seen")));
    events.addEventListener("changed", function () {
      if (submitting) return;
      events.close();
      fetch("/approvals", { credentials: "same-origin" }).then(function (response) {
        if (!response.ok) { window.location.replace("/approvals"); return null; }
        return response.text();
      }).then(function (text) {
        if (text === null || submitting) return;
        update(new DOMParser().parseFromString(text, "text/html"));
        follow();
      }, function () { if (!submitting) setTimeout(follow, 2000); });
    });
  }
  follow();
})();
