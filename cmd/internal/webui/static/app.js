// Auto-refresh of the overview that a person can pause; the choice is
// remembered in this browser.
(function () {
  var box = document.getElementById("autorefresh");
  if (!box) return;
  var key = "outboxd.autorefresh";
  box.checked = localStorage.getItem(key) !== "off";
  var timer = null;
  function arm() {
    if (timer) clearTimeout(timer);
    timer = box.checked ? setTimeout(function () { location.reload(); }, 10000) : null;
  }
  box.addEventListener("change", function () {
    localStorage.setItem(key, box.checked ? "on" : "off");
    arm();
  });
  arm();
})();

// Ticks or unticks every effect of a search's results at once.
(function () {
  var all = document.getElementById("tickall");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll('#results input[name="id"]').forEach(function (b) { b.checked = all.checked; });
  });
})();
