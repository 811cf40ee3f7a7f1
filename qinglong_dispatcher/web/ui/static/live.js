// Live refresh of a list page (progressive: without this script the page works as before).
// It listens to /ui/events; when something changed it reloads the page's <main> in place,
// unless the operator is editing a form on it, in which case it only says that news waits.
(function () {
  "use strict";
  var marker = document.getElementById("live");
  if (!marker || !window.EventSource || !window.fetch) {
    return;
  }
  var editing = false;
  var pending = null;
  document.addEventListener("input", function () { editing = true; }, true);
  document.addEventListener("change", function () { editing = true; }, true);

  function say(text) {
    marker.textContent = text;
    marker.hidden = false;
  }

  function reload() {
    pending = null;
    if (editing) {
      say("New activity: reload the page to see it.");
      return;
    }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) {
        if (!answer.ok) { throw new Error(String(answer.status)); }
        return answer.text();
      })
      .then(function (text) {
        var page = new DOMParser().parseFromString(text, "text/html");
        var fresh = page.querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main && !editing) {
          main.innerHTML = fresh.innerHTML;
          marker = document.getElementById("live") || marker;
          document.body.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () { say("New activity: reload the page to see it."); });
  }

  var source = new EventSource(marker.getAttribute("data-events"));
  function changed() {
    if (pending === null) {
      pending = window.setTimeout(reload, 500);
    }
  }
  ["approval.requested", "dispatch.settled"].forEach(function (name) {
    source.addEventListener(name, changed);
  });
  source.onmessage = changed;
})();
