// The action page: keep the tree's <details> (and the open tracebacks) as the operator left
// them when htmx swaps in a fresh live fragment. Without JavaScript the page works the same;
// only a refresh of the page resets what was opened.
(function () {
  "use strict";
  // details id -> open, for the ones the operator opened or closed.
  var state = new Map();

  // Record what the operator does (a click, or Enter/Space on a summary, which clicks it),
  // not "toggle" events: a freshly swapped-in <details open> fires one too.
  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element) || target.closest("a")) {
      return;
    }
    var summary = target.closest("summary");
    var details = summary && summary.parentElement;
    if (details instanceof HTMLDetailsElement && details.id && details.closest("[data-keep-open]")) {
      state.set(details.id, !details.open);
    }
  }, true);

  document.addEventListener("htmx:load", function (event) {
    var root = event.target;
    if (!(root instanceof Element) || !root.matches("[data-keep-open]")) {
      return;
    }
    state.forEach(function (open, id) {
      var el = document.getElementById(id);
      if (el instanceof HTMLDetailsElement && el.open !== open) {
        el.open = open;
      }
    });
  });
})();

// "Copy as JSON": the action as the API returns it, to the clipboard. Without JavaScript
// (or without a clipboard) the "API" link beside it opens the same JSON.
(function () {
  "use strict";

  function setUp() {
    document.querySelectorAll("button[data-copy-json]").forEach(function (button) {
      button.hidden = !(navigator.clipboard && window.fetch);
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("button[data-copy-json]");
    if (!button) {
      return;
    }
    var label = button.textContent;
    fetch(button.dataset.copyJson, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(response.status + " " + response.statusText);
        }
        return response.json();
      })
      .then(function (data) {
        return navigator.clipboard.writeText(JSON.stringify(data, null, 2));
      })
      .then(function () {
        button.textContent = "Copied";
        button.dataset.copied = "true";
      }, function (error) {
        button.textContent = "Could not copy (" + error.message + ")";
      })
      .finally(function () {
        window.setTimeout(function () {
          button.textContent = label;
          delete button.dataset.copied;
        }, 2000);
      });
  });

  // The graph of a big tree scrolls inside its frame: bring this page's action (or else
  // the failing leaf) into view when the graph first shows, and keep where the operator
  // scrolled to when a poll swaps in a fresh graph.
  var scrolled = null;

  function focusGraph(root) {
    var frame = root.querySelector("[data-graph]");
    if (!frame) {
      return;
    }
    if (scrolled) {
      frame.scrollTop = scrolled.top;
      frame.scrollLeft = scrolled.left;
      return;
    }
    var path = frame.querySelectorAll(".gn.on-path");
    var target = frame.querySelector(".gn.here") || path[path.length - 1];
    if (target && target.getBBox) {
      // Only when it is out of sight: a graph that fits stays where it starts.
      var box = target.getBBox();
      if (box.y + box.height > frame.clientHeight) {
        frame.scrollTop = Math.max(0, box.y - frame.clientHeight / 2);
      }
      if (box.x + Math.min(box.width, 40) > frame.clientWidth) {
        frame.scrollLeft = Math.max(0, box.x - frame.clientWidth / 3);
      }
    }
  }

  function start() {
    setUp();
    focusGraph(document);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
  document.addEventListener("htmx:beforeSwap", function () {
    var frame = document.querySelector("[data-graph]");
    if (frame) {
      scrolled = { top: frame.scrollTop, left: frame.scrollLeft };
    }
  });
  document.addEventListener("htmx:load", function (event) {
    if (event.target instanceof Element && event.target.matches("[data-keep-open]")) {
      focusGraph(event.target);
    }
  });
})();
