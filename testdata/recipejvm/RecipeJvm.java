// RecipeJvm is the JVM program of the recipe tests (receiver's
// recipes_test.go): java RecipeJvm GCS [TOKEN] runs GCS full collections
// (System.gc()), loads the five classes RecipeJvm$Known1 … Known5, runs
// two threads named recipe-worker-0 and recipe-worker-1, and prints "done".
// TOKEN only marks its command line.
public class RecipeJvm {
    static class Known1 {}
    static class Known2 {}
    static class Known3 {}
    static class Known4 {}
    static class Known5 {}

    public static void main(String[] args) throws Exception {
        int gcs = Integer.parseInt(args[0]);
        for (int i = 0; i < gcs; i++) {
            System.gc();
        }
        for (int i = 1; i <= 5; i++) {
            Class.forName("RecipeJvm$Known" + i);
        }
        Thread[] workers = new Thread[2];
        for (int i = 0; i < workers.length; i++) {
            workers[i] = new Thread(() -> {}, "recipe-worker-" + i);
            workers[i].start();
        }
        for (Thread w : workers) {
            w.join();
        }
        System.out.println("done");
    }
}
