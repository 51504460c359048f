// Navigation on every page, without inline script (the CSP forbids it): the UTC / local
// time toggle and keyboard shortcuts with their help overlay ("?"); static/menu.js adds the
// phone's Menu button. The server renders
// every time in UTC ("2026-12-01 13:05:09"); in local mode this rewrites those texts in
// place, keeping the UTC value in data-utc and a title, and again after each htmx swap.
// Without JavaScript the pages show UTC and the header's "Go to" form still works.
// A time input ([data-utc-input], a datetime-local whose value the server sends and reads
// in UTC) shows and takes local time in local mode: its value is converted on display and
// back to UTC in the form's data (the "formdata" event, for htmx and a plain submit alike).
(function () {
  "use strict";

  var KEY = "stepwise.time";
  var STAMP = /\b(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(\.\d+)?\b/g;

  function local() {
    try {
      return window.localStorage.getItem(KEY) === "local";
    } catch (e) {
      return false;
    }
  }

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function format(date) {
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
  }

  function zone() {
    var minutes = -new Date().getTimezoneOffset();
    var sign = minutes < 0 ? "-" : "+";
    minutes = Math.abs(minutes);
    return "UTC" + sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  // Wrap each UTC time under `root` in <span class="local-time" data-utc> showing local time.
  function toLocal(root) {
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: function (node) {
        var parent = node.parentElement;
        if (!parent || parent.closest("pre, script, style, textarea, code, svg, [data-utc]")) {
          return NodeFilter.FILTER_REJECT;
        }
        STAMP.lastIndex = 0;
        return STAMP.test(node.nodeValue) ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT;
      }
    });
    var found = [];
    while (walker.nextNode()) {
      found.push(walker.currentNode);
    }
    found.forEach(function (node) {
      var text = node.nodeValue;
      var fragment = document.createDocumentFragment();
      var last = 0;
      STAMP.lastIndex = 0;
      var match;
      while ((match = STAMP.exec(text)) !== null) {
        fragment.appendChild(document.createTextNode(text.slice(last, match.index)));
        var date = new Date(match[1] + "T" + match[2] + (match[3] || "") + "Z");
        var span = document.createElement("span");
        span.className = "local-time";
        span.dataset.utc = match[0];
        span.title = match[0] + " UTC";
        span.textContent = isNaN(date.getTime()) ? match[0] : format(date);
        fragment.appendChild(span);
        last = match.index + match[0].length;
      }
      fragment.appendChild(document.createTextNode(text.slice(last)));
      node.parentNode.replaceChild(fragment, node);
    });
  }

  function toUtc(root) {
    root.querySelectorAll("span.local-time[data-utc]").forEach(function (span) {
      span.replaceWith(document.createTextNode(span.dataset.utc));
    });
  }

  // --- time inputs ---------------------------------------------------------------------------

  var INPUT = "input[data-utc-input]";

  function inputValue(date) {
    return format(date).replace(" ", "T");
  }

  // "2026-12-01T13:05[:09]" in UTC -> the same moment as a local datetime-local value.
  function utcToLocal(value) {
    var date = new Date(value + (value.length === 16 ? ":00" : "") + "Z");
    return isNaN(date.getTime()) ? value : inputValue(date);
  }

  // A local datetime-local value -> the same moment in UTC (without an offset, ISO dates
  // with a time are read as local time).
  function localToUtc(value) {
    var date = new Date(value);
    return isNaN(date.getTime()) ? value : date.toISOString().slice(0, 19);
  }

  function showInputs(root, on) {
    root.querySelectorAll(INPUT).forEach(function (input) {
      // A property, not a data- attribute: htmx's history snapshots keep attributes, and a
      // restored input holds the server's UTC value again.
      var shown = input.stepwiseZone === "local";
      if (shown !== on && input.value) {
        input.value = on ? utcToLocal(input.value) : localToUtc(input.value);
      }
      input.stepwiseZone = on ? "local" : "utc";
    });
    // Words that name the zone the times are in ("times in UTC", a field's "(UTC)").
    root.querySelectorAll("[data-zone-label]").forEach(function (label) {
      label.textContent = on ? zone() : "UTC";
      label.title = on ? "your time zone" : "";
    });
  }

  document.addEventListener("formdata", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) {
      return;
    }
    form.querySelectorAll(INPUT).forEach(function (input) {
      if (input.name && input.value && input.stepwiseZone === "local") {
        event.formData.set(input.name, localToUtc(input.value));
      }
    });
  }, true);

  var toggle;

  function showMode() {
    if (!toggle) {
      return;
    }
    var on = local();
    toggle.textContent = on ? "Local time" : "UTC";
    toggle.title = on ? "Times in your time zone (" + zone() + "); press t for UTC" : "Times in UTC; press t for your time zone (" + zone() + ")";
    toggle.setAttribute("aria-pressed", on ? "true" : "false");
    document.documentElement.dataset.time = on ? "local" : "utc";
  }

  function switchTime() {
    var on = !local();
    try {
      window.localStorage.setItem(KEY, on ? "local" : "utc");
    } catch (e) {
      return;
    }
    if (on) {
      toLocal(document.body);
    } else {
      toUtc(document.body);
    }
    showInputs(document, on);
    showMode();
  }

  // --- the shortcuts --------------------------------------------------------------------------

  var GO = { o: "Overview", a: "Actions", l: "Lanes", h: "Achievements", c: "Catalog", u: "Audit" };
  var dialog;

  function helpRows() {
    var rows = [
      [["?"], "show or hide this help"],
      [["/"], "go to an action by its id"],
      [["t"], "times in UTC or in your time zone"]
    ];
    Object.keys(GO).forEach(function (key) {
      rows.push([["g", key], "go to " + GO[key]]);
    });
    if (document.querySelector(".view-switch")) {
      rows.push([["v"], "the tree as a list, a graph, or both"]);
    }
    if (document.querySelector(".failure-path")) {
      rows.push([["f"], "the failure path"]);
    }
    rows.push([["Esc"], "close this help, leave a field"]);
    return rows;
  }

  function help() {
    if (dialog && dialog.open) {
      dialog.close();
      return;
    }
    if (!dialog) {
      dialog = document.createElement("dialog");
      dialog.className = "shortcuts";
      dialog.id = "shortcuts";
      dialog.setAttribute("aria-labelledby", "shortcuts-title");
      var close = document.createElement("button");
      close.type = "button";
      close.className = "btn btn-quiet close";
      close.textContent = "Close";
      close.addEventListener("click", function () { dialog.close(); });
      var title = document.createElement("h2");
      title.id = "shortcuts-title";
      title.textContent = "Keyboard shortcuts";
      dialog.appendChild(close);
      dialog.appendChild(title);
      dialog.appendChild(document.createElement("table"));
      document.body.appendChild(dialog);
    }
    var table = dialog.querySelector("table");
    table.textContent = "";
    helpRows().forEach(function (row) {
      var tr = table.insertRow();
      var keys = tr.insertCell();
      row[0].forEach(function (key, i) {
        if (i) {
          keys.appendChild(document.createTextNode(" then "));
        }
        var kbd = document.createElement("kbd");
        kbd.textContent = key;
        keys.appendChild(kbd);
      });
      tr.insertCell().textContent = row[1];
    });
    dialog.showModal();
  }

  function navLink(label) {
    var links = document.querySelectorAll(".topbar .nav a");
    for (var i = 0; i < links.length; i++) {
      if (links[i].textContent.trim() === label) {
        return links[i];
      }
    }
    return null;
  }

  function cycleView() {
    // The links of the views not shown, in order: list -> graph -> both -> list.
    var order = ["list", "graph", "both"];
    var current = document.querySelector(".view-switch [aria-current]");
    var index = current ? order.indexOf(current.textContent.trim().toLowerCase()) : -1;
    var next = document.querySelector('.view-switch a[data-view="' + order[(index + 1) % 3] + '"]');
    if (next) {
      next.click();
    }
  }

  var pendingG = 0;

  function typing(target) {
    return target instanceof Element &&
      (target.closest("input, textarea, select, [contenteditable]") !== null);
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) {
      return;
    }
    if (typing(event.target)) {
      if (event.key === "Escape") {
        event.target.blur();
      }
      return;
    }
    var key = event.key;
    if (pendingG && Date.now() - pendingG < 1500) {
      pendingG = 0;
      var link = GO[key] && navLink(GO[key]);
      if (link) {
        event.preventDefault();
        link.click();
      }
      return;
    }
    pendingG = 0;
    if (key === "?") {
      event.preventDefault();
      help();
    } else if (key === "/") {
      var jump = document.getElementById("jump-id");
      if (jump) {
        event.preventDefault();
        jump.focus();
        jump.select();
      }
    } else if (key === "g") {
      pendingG = Date.now();
    } else if (key === "t") {
      switchTime();
    } else if (key === "v") {
      cycleView();
    } else if (key === "f") {
      var path = document.querySelector(".failure-path");
      if (path) {
        path.scrollIntoView({ block: "start" });
      }
    }
  });

  function tools() {
    var header = document.querySelector(".topbar");
    var session = header && header.querySelector(".session");
    if (!header || !session) {
      return;
    }
    var box = document.createElement("div");
    box.className = "nav-tools";
    toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "btn btn-quiet time-toggle";
    toggle.addEventListener("click", switchTime);
    var keys = document.createElement("button");
    keys.type = "button";
    keys.className = "btn btn-quiet shortcuts-button";
    keys.textContent = "?";
    keys.title = "Keyboard shortcuts (?)";
    keys.setAttribute("aria-label", "Keyboard shortcuts");
    keys.addEventListener("click", help);
    box.appendChild(toggle);
    box.appendChild(keys);
    header.insertBefore(box, session);
    showMode();
  }

  function start() {
    tools();
    if (local()) {
      toLocal(document.body);
      showInputs(document, true);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }

  // Fresh fragments come in UTC: show them in local time too.
  document.addEventListener("htmx:load", function (event) {
    if (local() && event.target instanceof Element) {
      toLocal(event.target);
      showInputs(event.target, true);
    }
  });
})();
