// The header's Menu button on a phone, without inline script (the CSP forbids it). It runs
// after static/navigation.js (both deferred, in document order), whose time and shortcut
// tools it folds away too.
(function () {
  "use strict";

  // Below 720px (navigation.css) the header keeps the brand, "Go to" and a Menu button; the
  // pages' links, the tools and the session fold under it. Without JavaScript there is no
  // button and the links wrap onto rows of their own instead.

  function menu() {
    var header = document.querySelector(".topbar");
    var nav = header && header.querySelector(".nav");
    if (!nav) {
      return;
    }
    var folded = [nav].concat(Array.prototype.slice.call(header.querySelectorAll(".nav-tools, .session")));
    folded.forEach(function (part, i) {
      part.id = part.id || "topbar-part-" + i;
    });
    var button = document.createElement("button");
    button.type = "button";
    button.className = "btn menu-toggle";
    button.setAttribute("aria-expanded", "false");
    button.setAttribute("aria-controls", folded.map(function (part) { return part.id; }).join(" "));
    // Its name is "Menu"; the icon and the page's name beside it are for the eye only (the
    // page's link says aria-current already).
    var icon = document.createElement("span");
    icon.className = "menu-icon";
    icon.setAttribute("aria-hidden", "true");
    icon.textContent = "☰";
    button.appendChild(icon);
    button.appendChild(document.createTextNode("Menu"));
    var current = nav.querySelector('[aria-current="page"]');
    if (current) {
      var where = document.createElement("span");
      where.className = "menu-current";
      where.setAttribute("aria-hidden", "true");
      where.textContent = current.textContent.trim();
      button.appendChild(where);
    }
    function open(on) {
      header.classList.toggle("menu-open", on);
      button.setAttribute("aria-expanded", on ? "true" : "false");
    }
    button.addEventListener("click", function () {
      open(!header.classList.contains("menu-open"));
    });
    header.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && header.classList.contains("menu-open")) {
        open(false);
        button.focus();
      }
    });
    header.insertBefore(button, nav);
    header.classList.add("has-menu");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", menu);
  } else {
    menu();
  }
})();
